-- Settle one admitted call: give back its slot and probe permits, record the outcome in
-- both breaker layers, apply the AIMD sample and update the retry budget, atomically.
-- KEYS: 1 slots zset, 2 aimd hash, 3 caps hash, 4 tenant breaker hash, 5 tenant probes,
--       6 global breaker hash, 7 global probes, 8 retry budget hash, 9 destination's tenants set
-- ARGV: 1 now, 2 token, 3 outcome (success|overload|failure|ignore), 4 slot epoch,
--       5 initial limit, 6 min limit, 7 default cap, 8 backoff ratio, 9 min utilization,
--       10-13 tenant breaker cfg, 14-17 global breaker cfg, 18 state ttl (ms),
--       19 budget max tokens, 20 budget token ratio, 21 tenant id
-- Reply: {old_limit, new_limit, epoch, cut, lease_held, budget_tokens, events...}

local now = tonumber(ARGV[1])
local token = ARGV[2]
local outcome = ARGV[3]
local ttl_ms = tonumber(ARGV[18])

local held = redis.call('ZREM', KEYS[1], token)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', num(now))

local tenant = bk_load('tenant', KEYS[4], KEYS[5], bk_cfg(ARGV, 10))
local global = bk_load('global', KEYS[6], KEYS[7], bk_cfg(ARGV, 14))
bk_refresh(tenant, now)
bk_refresh(global, now)
local global_was = global.state
if outcome == 'ignore' then
  bk_release_probe(tenant, token)
  bk_release_probe(global, token)
else
  if outcome ~= 'success' then
    -- Visibility lists only tenants whose layer has counted something, so only failures
    -- need to register the tenant (one write less on the hot path).
    redis.call('SADD', KEYS[9], ARGV[21])
  end
  bk_record(tenant, outcome == 'success', token, now)
  bk_record(global, outcome == 'success', token, now)
end
bk_save(tenant, ttl_ms)
bk_save(global, ttl_ms)

-- The global breaker opening is itself an overload signal for the destination's limit (a
-- tenant breaker is not: one tenant's bad credentials say nothing about capacity).
local overload = outcome == 'overload' or (global_was ~= 'open' and global.state == 'open')

local cap = tonumber(redis.call('HGET', KEYS[3], 'max_concurrency')) or tonumber(ARGV[7])
local min_limit = tonumber(ARGV[6])
local limit, epoch = aimd_load(KEYS[2], tonumber(ARGV[5]), min_limit, cap)
local old_limit, cut = limit, 0
if outcome == 'success' then
  -- In flight when this call finished, itself included.
  local in_flight = redis.call('ZCARD', KEYS[1]) + 1
  limit = aimd_on_success(limit, in_flight, min_limit, cap, tonumber(ARGV[9]))
elseif overload then
  limit, epoch, cut = aimd_on_overload(limit, epoch, tonumber(ARGV[4]), tonumber(ARGV[8]),
    min_limit, cap)
end
if limit ~= old_limit or cut == 1 then
  redis.call('HSET', KEYS[2], 'limit', num(limit), 'epoch', num(epoch))
end

local max_tokens = tonumber(ARGV[19])
local tokens = budget_load(KEYS[8], max_tokens)
local new_tokens = budget_after(tokens, outcome, max_tokens, tonumber(ARGV[20]))
if new_tokens ~= tokens then
  budget_save(KEYS[8], new_tokens, ttl_ms)
end

local out = {num(old_limit), num(limit), epoch, cut, held, num(new_tokens)}
for i = 1, #EVENTS do
  out[#out + 1] = EVENTS[i]
end
return out
