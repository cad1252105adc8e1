-- AIMD arithmetic. Mirrors admission/aimd.py operation for operation; a contract test feeds
-- both the same samples. Stored in the hash `sb:aimd:{destination}` as {limit, epoch}.

local function aimd_clamp(limit, min_limit, cap)
  return math.max(min_limit, math.min(limit, cap))
end

-- Current limit (clamped to today's cap), cut epoch and growth hold; a new destination starts
-- at `initial`.
local function aimd_load(key, initial, min_limit, cap)
  local v = redis.call('HMGET', key, 'limit', 'epoch', 'hold_until')
  local limit = tonumber(v[1]) or initial
  return aimd_clamp(limit, min_limit, cap), tonumber(v[2]) or 0, tonumber(v[3]) or 0
end

local function aimd_slots(limit, cap)
  return math.max(1, math.min(math.floor(limit), cap))
end

-- Additive increase, about +1 per window of `limit` successes; none while app-limited, nor
-- while a cut's Retry-After holds growth.
local function aimd_on_success(limit, in_flight, min_limit, cap, min_utilization, now, hold)
  if in_flight < limit * min_utilization or now < hold then
    return limit
  end
  return aimd_clamp(limit + 1 / limit, min_limit, cap)
end

-- Multiplicative decrease, at most once per epoch: a call acquired before the latest cut
-- belongs to the congestion event that cut already answered. A cut with a Retry-After holds
-- growth until then (at most max_hold seconds).
local function aimd_on_overload(limit, epoch, slot_epoch, backoff, min_limit, cap, now, hold,
                                retry_after, max_hold)
  if slot_epoch < epoch then
    return limit, epoch, 0, hold
  end
  if retry_after > 0 then
    hold = math.max(hold, now + math.min(retry_after, max_hold))
  end
  return aimd_clamp(limit * backoff, min_limit, cap), epoch + 1, 1, hold
end
