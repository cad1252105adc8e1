-- AIMD arithmetic. Mirrors admission/aimd.py operation for operation; a contract test feeds
-- both the same samples. Stored in the hash `sb:aimd:{destination}` as {limit, epoch}.

local function aimd_clamp(limit, min_limit, cap)
  return math.max(min_limit, math.min(limit, cap))
end

-- Current limit (clamped to today's cap), cut epoch and growth hold (its end, ceiling and
-- length); a new destination starts at `initial`.
local function aimd_load(key, initial, min_limit, cap)
  local v = redis.call('HMGET', key, 'limit', 'epoch', 'hold_until', 'hold_ceiling', 'hold_s')
  local limit = tonumber(v[1]) or initial
  return aimd_clamp(limit, min_limit, cap), tonumber(v[2]) or 0, tonumber(v[3]) or 0,
    tonumber(v[4]) or 0, tonumber(v[5]) or 0
end

local function aimd_slots(limit, cap)
  return math.max(1, math.min(math.floor(limit), cap))
end

-- Additive increase, about +1 per window of `limit` successes; none while app-limited, and
-- no further than `ceiling` while a cut's Retry-After holds growth.
-- Slow start (epoch 0, never overloaded): a success adds a whole 1.
local function aimd_on_success(limit, epoch, in_flight, min_limit, cap, min_utilization, now,
                               hold, ceiling, slow_start)
  if in_flight < limit * min_utilization then
    return limit
  end
  local step = 1 / limit
  if slow_start and epoch == 0 then
    step = 1
  end
  local grown = aimd_clamp(limit + step, min_limit, cap)
  if now < hold then
    grown = math.max(limit, math.min(grown, ceiling))
  end
  return grown
end

-- Multiplicative decrease, at most once per epoch: a call acquired before the latest cut
-- belongs to the congestion event that cut already answered. A cut with a Retry-After holds
-- growth above one below the cut limit for that long, or for twice the previous hold
-- (`hold_s`) when it came during that hold or within its length after it (a probe that found
-- the same ceiling again); at most max_hold seconds.
-- The first overload ends slow start with a halving (regrowth during its hold only to the
-- middle of the range the capacity lies in).
local function aimd_on_overload(limit, epoch, slot_epoch, backoff, min_limit, cap, now, hold,
                                ceiling, hold_s, retry_after, max_hold, slow_start)
  if slot_epoch < epoch then
    return limit, epoch, 0, hold, ceiling, hold_s
  end
  local cut, new_ceiling
  if slow_start and epoch == 0 then
    cut = aimd_clamp(limit * 0.5, min_limit, cap)
    new_ceiling = math.max(cut, limit * 0.75 - 1)
  else
    cut = aimd_clamp(limit * backoff, min_limit, cap)
    new_ceiling = math.max(cut, limit - 1)
  end
  if retry_after > 0 then
    local length = retry_after
    if hold_s > 0 and now <= hold + hold_s then
      length = math.max(length, 2 * hold_s)
    end
    length = math.min(length, max_hold)
    hold = math.max(hold, now + length)
    ceiling = new_ceiling
    hold_s = length
  end
  return cut, epoch + 1, 1, hold, ceiling, hold_s
end
