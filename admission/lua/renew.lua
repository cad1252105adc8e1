-- Extend a live slot lease (and its probe permits) to now + lease_s. A lease that has
-- already expired is not revived: its capacity may have been handed out again, and an
-- expired probe has already counted as a hung failure.
-- KEYS: 1 slots zset, 2 tenant probes zset, 3 global probes zset
-- ARGV: 1 now, 2 token, 3 lease_s
-- Reply: 1 renewed, 0 lease lost

local now = tonumber(ARGV[1])
local expiry = num(now + tonumber(ARGV[3]))
local renewed = 0
for i = 1, 3 do
  local score = tonumber(redis.call('ZSCORE', KEYS[i], ARGV[2]))
  if score and score > now then
    redis.call('ZADD', KEYS[i], expiry, ARGV[2])
    if i == 1 then
      renewed = 1
    end
  end
end
return renewed
