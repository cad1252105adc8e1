-- AIMD arithmetic. Mirrors admission/aimd.py operation for operation; a contract test feeds
-- both the same samples. Stored in the hash `sb:aimd:{destination}` as {limit, epoch}.

local function aimd_clamp(limit, min_limit, cap)
  return math.max(min_limit, math.min(limit, cap))
end

-- Current limit (clamped to today's cap) and cut epoch; a new destination starts at `initial`.
local function aimd_load(key, initial, min_limit, cap)
  local v = redis.call('HMGET', key, 'limit', 'epoch')
  local limit = tonumber(v[1]) or initial
  return aimd_clamp(limit, min_limit, cap), tonumber(v[2]) or 0
end

local function aimd_slots(limit, cap)
  return math.max(1, math.min(math.floor(limit), cap))
end

-- Additive increase, about +1 per window of `limit` successes; none while app-limited.
local function aimd_on_success(limit, in_flight, min_limit, cap, min_utilization)
  if in_flight < limit * min_utilization then
    return limit
  end
  return aimd_clamp(limit + 1 / limit, min_limit, cap)
end

-- Multiplicative decrease, at most once per epoch: a call acquired before the latest cut
-- belongs to the congestion event that cut already answered.
local function aimd_on_overload(limit, epoch, slot_epoch, backoff, min_limit, cap)
  if slot_epoch < epoch then
    return limit, epoch, 0
  end
  return aimd_clamp(limit * backoff, min_limit, cap), epoch + 1, 1
end
