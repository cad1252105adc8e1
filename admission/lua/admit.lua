-- Admit one call to a destination for a tenant, atomically: breakers, then AIMD slot, then
-- the destination's rate; nothing is taken unless everything passes.
-- KEYS: 1 slots zset, 2 aimd hash, 3 caps hash, 4 destination rate zset,
--       5 tenant breaker hash, 6 tenant probes zset, 7 global breaker hash,
--       8 global probes zset, 9 destinations set
-- ARGV: 1 now (s), 2 token, 3 lease_s, 4 initial limit, 5 min limit, 6 default cap,
--       7-10 tenant breaker cfg, 11-14 global breaker cfg, 15 state ttl (ms),
--       16 destination
-- Reply: {code, epoch, in_flight, limit, hint_s, layer, tenant_probe, global_probe, events...}
--   code 1 granted, 2 breaker blocks (layer = 'layer:state', hint = s until it may pass),
--        3 no free slot (hint = s until the earliest lease expires), 4 rate (hint = wait s)

local now = tonumber(ARGV[1])
local token = ARGV[2]
local lease_s = tonumber(ARGV[3])
local ttl_ms = tonumber(ARGV[15])

redis.call('SADD', KEYS[9], ARGV[16])

local tenant = bk_load('tenant', KEYS[5], KEYS[6], bk_cfg(ARGV, 7))
local global = bk_load('global', KEYS[7], KEYS[8], bk_cfg(ARGV, 11))
bk_refresh(tenant, now)
bk_refresh(global, now)

local function reply(code, epoch, in_flight, limit, hint, layer, t_probe, g_probe)
  bk_save(tenant, ttl_ms)
  bk_save(global, ttl_ms)
  local out = {code, epoch, in_flight, num(limit), num(hint), layer, t_probe, g_probe}
  for i = 1, #EVENTS do
    out[#out + 1] = EVENTS[i]
  end
  return out
end

local t_mode, t_wait = bk_admission(tenant, now)
local g_mode, g_wait = bk_admission(global, now)
if g_mode == 'block' then
  return reply(2, 0, 0, 0, g_wait, 'global:' .. global.state, 0, 0)
end
if t_mode == 'block' then
  return reply(2, 0, 0, 0, t_wait, 'tenant:' .. tenant.state, 0, 0)
end

-- Expired leases belong to workers that died mid-call: their capacity comes back here.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', num(now))
local cap = tonumber(redis.call('HGET', KEYS[3], 'max_concurrency')) or tonumber(ARGV[6])
local rate = tonumber(redis.call('HGET', KEYS[3], 'rate_per_second'))
local limit, epoch = aimd_load(KEYS[2], tonumber(ARGV[4]), tonumber(ARGV[5]), cap)
local in_flight = redis.call('ZCARD', KEYS[1])
if in_flight >= aimd_slots(limit, cap) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return reply(3, epoch, in_flight, limit, tonumber(first[2]) - now, '', 0, 0)
end

if rate then
  -- Rates under 1/s get a window of 1/rate seconds so that at least one call fits.
  local window = math.max(1, 1 / rate)
  local allowed = math.max(1, math.floor(rate * window + 1e-9))
  local ok, _, wait = window_try(KEYS[4], now, window, allowed, token)
  if not ok then
    return reply(4, epoch, in_flight, limit, wait, '', 0, 0)
  end
end

local expiry = num(now + lease_s)
redis.call('ZADD', KEYS[1], expiry, token)
local t_probe, g_probe = 0, 0
if t_mode == 'probe' then
  redis.call('ZADD', tenant.z, expiry, token)
  t_probe = 1
end
if g_mode == 'probe' then
  redis.call('ZADD', global.z, expiry, token)
  g_probe = 1
end
return reply(1, epoch, in_flight + 1, limit, 0, '', t_probe, g_probe)
