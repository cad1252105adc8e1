-- Extend live slot leases (and their probe permits) to now + lease_s, many in one call (a
-- worker renews the slots of all its calls under way at once). A lease that has already
-- expired is not revived: its capacity may have been handed out again, and an expired probe
-- has already counted as a hung failure.
-- KEYS: per lease, 3 keys: its slots zset, its tenant probes zset, its global probes zset
-- ARGV: 1 now, 2 lease_s, then per lease its token
-- Reply: per lease, 1 renewed, 0 lease lost

if #KEYS ~= 3 * (#ARGV - 2) then
  return redis.error_reply('renew: 3 keys per lease token expected')
end
local now = tonumber(ARGV[1])
local expiry = num(now + tonumber(ARGV[2]))
local replies = {}
for lease = 1, #ARGV - 2 do
  local token = ARGV[lease + 2]
  local renewed = 0
  for i = 1, 3 do
    local key = KEYS[(lease - 1) * 3 + i]
    local score = tonumber(redis.call('ZSCORE', key, token))
    if score and score > now then
      redis.call('ZADD', key, expiry, token)
      if i == 1 then
        renewed = 1
      end
    end
  end
  replies[lease] = renewed
end
return replies
