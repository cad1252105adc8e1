-- Sliding-window counter on a sorted set (score = time in s, member unique per call, so two
-- calls at the same timestamp are two entries). An entry counts while
-- now - window < score: it leaves the window exactly `window` seconds after it entered.
-- Returns allowed (bool), entries in the window (after adding), and, when refused, the
-- seconds until the oldest entry leaves.
local function window_try(key, now, window, limit, member)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now - window))
  local used = redis.call('ZCARD', key)
  if used >= limit then
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local wait = window
    if oldest[2] then
      wait = tonumber(oldest[2]) + window - now
    end
    return false, used, wait
  end
  redis.call('ZADD', key, num(now), member)
  -- Real-time expiry only garbage-collects idle windows; it is far longer than the window.
  redis.call('PEXPIRE', key, math.ceil(window * 1000) + 60000)
  return true, used + 1, 0
end
