-- Take one item from a tenant's sliding window.
-- KEYS: 1 tenant window zset, 2 per-tenant limit overrides hash, 3 tenants set
-- ARGV: 1 now, 2 window_s, 3 default limit, 4 unique member, 5 tenant id
-- Reply: {allowed (0/1), used, limit, wait_s}

local now = tonumber(ARGV[1])
redis.call('SADD', KEYS[3], ARGV[5])
local limit = tonumber(redis.call('HGET', KEYS[2], ARGV[5])) or tonumber(ARGV[3])
local ok, used, wait = window_try(KEYS[1], now, tonumber(ARGV[2]), limit, ARGV[4])
local allowed = 0
if ok then
  allowed = 1
end
return {allowed, used, limit, num(wait)}
