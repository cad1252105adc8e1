-- One batch of admission operations, applied atomically and in order (admission/backend.py
-- builds it). Every worker coalesces the admits, settlements and tenant takes that its steps
-- ask for while the previous batch is in flight, so a busy worker makes one round trip for
-- many calls, and the state each batch touches is read once and written once.
--
-- KEYS: 1 destinations set, 2 tenants set, 3 tenant limit overrides hash, 4 the marker that
--   the operator settings were copied into this Redis, then key groups
--   destination group (8): slots zset, aimd hash, caps hash, destination rate zset,
--                          global breaker hash, global probes zset, retry budget hash,
--                          the destination's breaker-tenants set
--   tenant breaker group (2): tenant breaker hash, tenant probes zset
--   tenant window (1): the tenant's rate window zset
-- ARGV: 1 now, 2 initial limit, 3 min limit, 4 default cap, 5 backoff ratio,
--       6 min utilization, 7-10 tenant breaker cfg, 11-14 global breaker cfg, 15 state ttl (ms),
--       16 budget max tokens, 17 budget token ratio, 18 tenant window (s), 19 longest growth
--       hold after a cut (s), 20 budget refill per second, 21 slow start ('1' on), 22 settings
--       required ('1': answer 'unseeded' without doing anything while KEYS[4] is absent), then
--       operations of OP_WIDTH fields each:
--   A (admit):  dest group, tenant group, token, lease_s, destination, tenant id,
--               window key (0 = take no tenant item), flags ('r' = a retry: budget check;
--               'h' = a hand-over: record the call, which has started, without checks),
--               tenant default limit
--   S (settle): dest group, tenant group, token, outcome, slot epoch, tenant id,
--               Retry-After of the answer (s, 0 = none), cause (what a failure was, e.g.
--               "HTTP 500": kept by a breaker layer it opens; "" for a success)
--   T (take one tenant item): window key, member, tenant id, tenant default limit
-- Reply: 'unseeded' (see ARGV 22), else one table per operation, in order, its last element the breaker transitions it made
--   A: {code, epoch, in_flight, limit, hint_s, layer, t_probe, g_probe, used, limit, free,
--       rate_capped, events, cap, rate, at_cap, opened_at, cause}  (free: slots the limit leaves
--       unused after this operation, negative when over it; rate_capped: the destination has
--       a ratePerSecond; cap, rate: its maxConcurrency and ratePerSecond (0: none); at_cap:
--       the AIMD limit has reached the cap, so the cap, not the limit, bounds the slots;
--       opened_at: with code 2, the blocking layer's stored opening time, which names the
--       opening the refusal belongs to, the same while it is open and then half-open;
--       cause: with code 2, the failure that opened the blocking layer, "" if unknown)
--      code 1 granted, 2 breaker blocks, 3 no free slot, 4 destination rate, 5 retry budget
--      exhausted, 6 tenant at its rate limit (used/limit of its window, hint = s until room)
--   S: {old_limit, new_limit, epoch, cut, lease_held, budget_tokens, free, global breaker
--       state, tenant breaker state, events}
--   T: {allowed, used, limit, wait_s, events}

local OP_WIDTH = 10
local FIRST_OP = 23
local now = tonumber(ARGV[1])
local initial, min_limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local default_cap, backoff = tonumber(ARGV[4]), tonumber(ARGV[5])
local min_utilization = tonumber(ARGV[6])
local tenant_cfg, global_cfg = bk_cfg(ARGV, 7), bk_cfg(ARGV, 11)
local ttl_ms = tonumber(ARGV[15])
local budget_max, budget_ratio = tonumber(ARGV[16]), tonumber(ARGV[17])
local window_s = tonumber(ARGV[18])
local max_hold_s = tonumber(ARGV[19])
local budget_refill = tonumber(ARGV[20])
local slow_start = ARGV[21] == '1'

-- Caps and tenant rate limits are the operator's, stored in the database; Redis holds copies.
-- A Redis that lost them (restarted without its data) must not decide with the defaults: the
-- caller copies them back and sends the batch again. One EXISTS a batch.
if ARGV[22] == '1' and redis.call('EXISTS', KEYS[4]) == 0 then
  return 'unseeded'
end

-- ── state read once per batch, written once at the end ───────────────────────────────────

local DESTS, TENANTS, WINDOWS = {}, {}, {}
local DEST_ORDER, TENANT_ORDER, WINDOW_ORDER = {}, {}, {}

local function dest(base)
  local d = DESTS[base]
  if d then
    return d
  end
  d = {
    slots = KEYS[base], aimd = KEYS[base + 1], caps = KEYS[base + 2], rate = KEYS[base + 3],
    budget_key = KEYS[base + 6], tenants_key = KEYS[base + 7], failing = {}, named = false,
  }
  -- Expired leases belong to workers that died mid-call: their capacity comes back here.
  redis.call('ZREMRANGEBYSCORE', d.slots, '-inf', num(now))
  d.in_flight = redis.call('ZCARD', d.slots)
  local caps = redis.call('HMGET', d.caps, 'max_concurrency', 'rate_per_second')
  d.cap = tonumber(caps[1]) or default_cap
  d.rate_per_s = tonumber(caps[2])
  d.limit, d.epoch, d.hold, d.ceiling, d.hold_s = aimd_load(d.aimd, initial, min_limit, d.cap)
  d.saved_limit, d.saved_epoch, d.saved_hold, d.saved_ceiling, d.saved_hold_s = d.limit,
    d.epoch, d.hold, d.ceiling, d.hold_s
  d.loaded_in_flight = d.in_flight
  d.settle_replies = {}
  d.global = bk_load('global', KEYS[base + 4], KEYS[base + 5], global_cfg)
  DESTS[base] = d
  DEST_ORDER[#DEST_ORDER + 1] = d
  return d
end

local function budget_of(d)
  if d.tokens == nil then
    d.tokens = budget_load(d.budget_key, budget_max, now, budget_refill)
    d.saved_tokens = d.tokens
  end
  return d.tokens
end

local function tenant_layer(base)
  local t = TENANTS[base]
  if not t then
    t = bk_load('tenant', KEYS[base], KEYS[base + 1], tenant_cfg)
    TENANTS[base] = t
    TENANT_ORDER[#TENANT_ORDER + 1] = t
  end
  return t
end

local function window(index, tenant_id, default_limit)
  local w = WINDOWS[index]
  if not w then
    redis.call('SADD', KEYS[2], tenant_id)
    w = {key = KEYS[index], members = {}}
    w.limit = tonumber(redis.call('HGET', KEYS[3], tenant_id)) or tonumber(default_limit)
    -- An item counts while now - window < its time: it leaves exactly window_s after.
    redis.call('ZREMRANGEBYSCORE', w.key, '-inf', num(now - window_s))
    w.used = redis.call('ZCARD', w.key)
    WINDOWS[index] = w
    WINDOW_ORDER[#WINDOW_ORDER + 1] = w
  end
  return w
end

-- Seconds until a full tenant window has room again (its oldest item leaves).
local function window_wait(w)
  local oldest = redis.call('ZRANGE', w.key, 0, 0, 'WITHSCORES')
  if oldest[2] then
    return tonumber(oldest[2]) + window_s - now
  end
  return window_s
end

-- Take one item from a tenant's window: allowed, used (after), limit, seconds until room.
-- `always`: take it even at the limit (a hand-over whose call has started already).
local function window_take(w, member, always)
  if w.used >= w.limit and not always then
    return false, w.used, w.limit, window_wait(w)
  end
  w.used = w.used + 1
  w.members[#w.members + 1] = member
  return true, w.used, w.limit, 0
end

-- Slots the destination's limit leaves unused right now (negative: more calls are in flight
-- than the limit admits, after a cut): a hint for waking local waiters and for hand-overs.
local function free_slots(d)
  return aimd_slots(d.limit, d.cap) - d.in_flight
end

local function events_since(first)
  local out = {}
  for i = first, #EVENTS do
    out[#out + 1] = EVENTS[i]
  end
  return out
end

-- ── operations ───────────────────────────────────────────────────────────────────────────

-- Why the call may not go now (a refusal reply), or nil. A hand-over ('h') skips this: its
-- call started already, on the slot of a call of the same tenant that just succeeded here.
-- Checks that take something (the destination's rate window) come last, so that a refusal
-- takes nothing.
-- `modes`: both layers' `bk_admission` answers, {t_mode, t_wait, g_mode, g_wait}.
local function refusal(d, tenant, modes, flags, token, w, reply)
  local t_mode, t_wait, g_mode, g_wait = modes[1], modes[2], modes[3], modes[4]
  if g_mode == 'block' then
    return reply(2, g_wait, 'global:' .. d.global.state, 0, 0, 0, 0, d.global.opened_at,
      d.global.cause)
  end
  if t_mode == 'block' then
    return reply(2, t_wait, 'tenant:' .. tenant.state, 0, 0, 0, 0, tenant.opened_at,
      tenant.cause)
  end
  if string.find(flags, 'r', 1, true) and budget_of(d) <= budget_max / 2 then
    return reply(5, 0, '', 0, 0)
  end
  if d.in_flight >= aimd_slots(d.limit, d.cap) then
    local first = redis.call('ZRANGE', d.slots, 0, 0, 'WITHSCORES')
    return reply(3, tonumber(first[2] or now) - now, '', 0, 0)
  end
  if w and w.used >= w.limit then
    return reply(6, window_wait(w), '', 0, 0, w.used, w.limit)
  end
  if d.rate_per_s then
    -- Rates under 1/s get a window of 1/rate seconds so that at least one call fits.
    local span = math.max(1, 1 / d.rate_per_s)
    local allowed = math.max(1, math.floor(d.rate_per_s * span + 1e-9))
    local ok, _, wait = window_try(d.rate, now, span, allowed, token)
    if not ok then
      return reply(4, wait, '', 0, 0)
    end
  end
  return nil
end

local function admit(op)
  local d = dest(tonumber(ARGV[op + 1]))
  if not d.named then
    redis.call('SADD', KEYS[1], ARGV[op + 5])
    d.named = true
  end
  local tenant = tenant_layer(tonumber(ARGV[op + 2]))
  local token, lease_s = ARGV[op + 3], tonumber(ARGV[op + 4])
  local window_index, flags = tonumber(ARGV[op + 7]), ARGV[op + 8]
  local handover = string.find(flags, 'h', 1, true) ~= nil
  local first_event = #EVENTS + 1
  bk_refresh(tenant, now)
  bk_refresh(d.global, now)

  local function reply(code, hint, layer, t_probe, g_probe, used, tenant_limit, opened_at, cause)
    return {code, d.epoch, d.in_flight, num(d.limit), num(hint), layer, t_probe, g_probe,
      used or 0, tenant_limit or 0, free_slots(d), d.rate_per_s and 1 or 0,
      events_since(first_event), d.cap, num(d.rate_per_s or 0),
      math.floor(d.limit) >= d.cap and 1 or 0, num(opened_at or 0), cause or ''}
  end

  local w = nil
  if window_index > 0 then
    w = window(window_index, ARGV[op + 6], ARGV[op + 9])
  end
  -- Nothing below changes the probe permits before they are taken, so one look serves both
  -- the checks and the probe bookkeeping.
  local t_mode, t_wait = bk_admission(tenant, now)
  local g_mode, g_wait = bk_admission(d.global, now)
  if not handover then
    local refused = refusal(d, tenant, {t_mode, t_wait, g_mode, g_wait}, flags, token, w, reply)
    if refused then
      return refused
    end
  end
  local used, tenant_limit = 0, 0
  if w then
    local _, n, limit = window_take(w, token, true)  -- room was checked above
    used, tenant_limit = n, limit
  end

  local expiry = num(now + lease_s)
  redis.call('ZADD', d.slots, expiry, token)
  d.in_flight = d.in_flight + 1
  local t_probe, g_probe = 0, 0
  if t_mode == 'probe' then
    redis.call('ZADD', tenant.z, expiry, token)
    t_probe = 1
  end
  if g_mode == 'probe' then
    redis.call('ZADD', d.global.z, expiry, token)
    g_probe = 1
  end
  return reply(1, 0, '', t_probe, g_probe, used, tenant_limit)
end

-- Outcomes: success; overload (503, timeout: AIMD cut and breaker failure); throttled (429:
-- the destination is healthy but at capacity, so AIMD cuts and the breakers count nothing,
-- or a busy destination would be shut off for a whole reset period); failure (breakers count
-- it, no cut); ignore (says nothing about the destination: only the slot and probe permits
-- are given back).
local function settle(op)
  local d = dest(tonumber(ARGV[op + 1]))
  local tenant = tenant_layer(tonumber(ARGV[op + 2]))
  local token, outcome = ARGV[op + 3], ARGV[op + 4]
  local slot_epoch, tenant_id = tonumber(ARGV[op + 5]), ARGV[op + 6]
  local retry_after = tonumber(ARGV[op + 7]) or 0
  local cause = ARGV[op + 8] or ''
  local global = d.global
  local first_event = #EVENTS + 1

  local held = redis.call('ZREM', d.slots, token)
  if held == 1 then
    d.in_flight = d.in_flight - 1
  end
  bk_refresh(tenant, now)
  bk_refresh(global, now)
  local global_was = global.state
  if outcome == 'ignore' or outcome == 'throttled' then
    bk_release_probe(tenant, token)
    bk_release_probe(global, token)
  else
    if outcome ~= 'success' and not d.failing[tenant_id] then
      -- Visibility lists only tenants whose layer has counted something, so only failures
      -- need to register the tenant (one write less on the hot path).
      redis.call('SADD', d.tenants_key, tenant_id)
      d.failing[tenant_id] = true
    end
    local ok = outcome == 'success'
    -- A failure its tenant's layer did not count (the layer was open, or half-open and the
    -- call no probe of it: a call sent before the tenant's breaker opened) says nothing the
    -- tenant layer has not said already, so it does not count in the global layer either:
    -- else one tenant's calls in flight when its breaker opened would open the global layer
    -- for every tenant. A global probe permit it holds goes back undecided, as an ignored
    -- call's does. (docs/architecture.md, 'Circuit breakers'.)
    if bk_record(tenant, ok, token, now, cause) or ok then
      bk_record(global, ok, token, now, cause)
    else
      bk_release_probe(global, token)
    end
  end

  -- The global breaker opening is itself an overload signal for the destination's limit (a
  -- tenant breaker is not: one tenant's bad credentials say nothing about capacity).
  local overload = outcome == 'overload' or outcome == 'throttled'
    or (global_was ~= 'open' and global.state == 'open')
  local old_limit, cut = d.limit, 0
  if outcome == 'success' then
    -- In flight when this call finished, itself included: the other calls settled in this
    -- batch were still in flight then, they only end in the same instant.
    local in_flight = math.max(d.in_flight + 1, d.loaded_in_flight)
    d.limit = aimd_on_success(d.limit, d.epoch, in_flight, min_limit, d.cap, min_utilization,
      now, d.hold, d.ceiling, slow_start)
  elseif overload then
    d.limit, d.epoch, cut, d.hold, d.ceiling, d.hold_s = aimd_on_overload(d.limit, d.epoch,
      slot_epoch, backoff, min_limit, d.cap, now, d.hold, d.ceiling, d.hold_s, retry_after,
      max_hold_s, slow_start)
  end
  if cut == 1 then
    d.cut = true
  end

  local tokens = budget_of(d)
  local budget_outcome = outcome
  if outcome == 'throttled' then
    budget_outcome = 'overload'
  end
  d.tokens = budget_after(tokens, budget_outcome, budget_max, budget_ratio)
  local settled = {num(old_limit), num(d.limit), d.epoch, cut, held, num(d.tokens),
    free_slots(d), global.state, tenant.state, events_since(first_event)}
  d.settle_replies[#d.settle_replies + 1] = settled
  return settled
end

local function take(op)
  local w = window(tonumber(ARGV[op + 1]), ARGV[op + 3], ARGV[op + 4])
  local ok, used, limit, wait = window_take(w, ARGV[op + 2])
  local allowed = 0
  if ok then
    allowed = 1
  end
  return {allowed, used, limit, num(wait), {}}
end

local replies = {}
for op = FIRST_OP, #ARGV, OP_WIDTH do
  local kind = ARGV[op]
  if kind == 'A' then
    replies[#replies + 1] = admit(op)
  elseif kind == 'S' then
    replies[#replies + 1] = settle(op)
  elseif kind == 'T' then
    replies[#replies + 1] = take(op)
  else
    return redis.error_reply('unknown admission operation ' .. tostring(kind))
  end
end

-- ── write back what changed ──────────────────────────────────────────────────────────────

for _, d in ipairs(DEST_ORDER) do
  if d.limit ~= d.saved_limit or d.epoch ~= d.saved_epoch or d.cut then
    redis.call('HSET', d.aimd, 'limit', num(d.limit), 'epoch', num(d.epoch))
  end
  if d.hold ~= d.saved_hold or d.ceiling ~= d.saved_ceiling or d.hold_s ~= d.saved_hold_s then
    redis.call('HSET', d.aimd, 'hold_until', num(d.hold), 'hold_ceiling', num(d.ceiling),
      'hold_s', num(d.hold_s))
  end
  -- Free slots as the whole batch left them (its admits included), not as each settlement
  -- saw them: waking waiters and hand-overs must not count slots this batch already took.
  for _, settled in ipairs(d.settle_replies) do
    settled[7] = free_slots(d)
  end
  bk_save(d.global, ttl_ms)
  if d.tokens ~= nil and d.tokens ~= d.saved_tokens then
    budget_save(d.budget_key, d.tokens, now, ttl_ms)
  end
end
for _, t in ipairs(TENANT_ORDER) do
  bk_save(t, ttl_ms)
end
for _, w in ipairs(WINDOW_ORDER) do
  local n = #w.members
  if n > 0 then
    -- ZADD in chunks: Lua's unpack has a stack limit.
    for first = 1, n, 500 do
      local args = {}
      for i = first, math.min(n, first + 499) do
        args[#args + 1] = num(now)
        args[#args + 1] = w.members[i]
      end
      redis.call('ZADD', w.key, unpack(args))
    end
    -- Real-time expiry only garbage-collects idle windows; it is far longer than the window.
    redis.call('PEXPIRE', w.key, math.ceil(window_s * 1000) + 60000)
  end
end
return replies
