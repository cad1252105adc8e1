-- Copy the operator settings from the database into a Redis that lost them (`Admission`
-- calls it when the exchange script answers 'unseeded'). Only what is absent is written: a
-- setting an operator changed meanwhile (written to Redis directly) is newer than this copy.
-- KEYS: 1 the settings marker, 2 tenant limit overrides hash, 3 destinations set, then one
--   caps hash per destination.
-- ARGV: 1 number of tenants, then per tenant its id and limit, then per caps hash its
--   destination, maxConcurrency and ratePerSecond ('' = none).
-- Returns {tenant limits written, caps written}; sets the marker.
local tenants = tonumber(ARGV[1])
local written_limits, written_caps = 0, 0
for i = 0, tenants - 1 do
  written_limits = written_limits + redis.call('HSETNX', KEYS[2], ARGV[2 + 2 * i], ARGV[3 + 2 * i])
end
local first = 2 + 2 * tenants
for k = 4, #KEYS do
  local at = first + 3 * (k - 4)
  if redis.call('EXISTS', KEYS[k]) == 0 then
    redis.call('HSET', KEYS[k], 'max_concurrency', ARGV[at + 1])
    if ARGV[at + 2] ~= '' then
      redis.call('HSET', KEYS[k], 'rate_per_second', ARGV[at + 2])
    end
    redis.call('SADD', KEYS[3], ARGV[at])
    written_caps = written_caps + 1
  end
end
redis.call('SET', KEYS[1], '1')
return {written_limits, written_caps}
