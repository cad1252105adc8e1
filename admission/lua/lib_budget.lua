-- Retry budget token bucket (gRPC retry throttling). Mirrors admission/retry_budget.py.
-- Hash `sb:retry-budget:{destination}` = {tokens}; a missing bucket is full.

local function budget_load(key, max_tokens)
  local t = tonumber(redis.call('HGET', key, 'tokens'))
  if t == nil then
    return max_tokens
  end
  return math.max(0, math.min(t, max_tokens))
end

local function budget_after(tokens, outcome, max_tokens, token_ratio)
  if outcome == 'success' then
    return math.min(max_tokens, tokens + token_ratio)
  end
  if outcome == 'overload' or outcome == 'failure' then
    return math.max(0, tokens - 1)
  end
  return tokens
end

local function budget_save(key, tokens, ttl_ms)
  redis.call('HSET', key, 'tokens', num(tokens))
  redis.call('PEXPIRE', key, ttl_ms)
end
