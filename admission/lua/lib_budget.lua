-- Retry budget token bucket (gRPC retry throttling, plus a slow refill with time). Mirrors
-- admission/retry_budget.py. Hash `sb:retry-budget:{destination}` = {tokens, at}; a missing
-- bucket is full.

-- Tokens now: the stored ones plus what `refill_per_s` added since they were stored.
local function budget_load(key, max_tokens, now, refill_per_s)
  local v = redis.call('HMGET', key, 'tokens', 'at')
  local t = tonumber(v[1])
  if t == nil then
    return max_tokens
  end
  local at = tonumber(v[2]) or now
  t = t + math.max(0, now - at) * refill_per_s
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

local function budget_save(key, tokens, now, ttl_ms)
  redis.call('HSET', key, 'tokens', num(tokens), 'at', num(now))
  redis.call('PEXPIRE', key, ttl_ms)
end
