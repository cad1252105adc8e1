-- Layered circuit breakers: the state machine (see admission/breaker.py for the table).
-- One function per transition; every transition is appended to EVENTS as
-- "layer:from:to" so Python can log it. State per layer:
--   hash  <prefix>:state  = {state, failures, opened_at, successes, cause}
--   (cause: what the failure that last opened it was, as the settlement named it, e.g.
--   "HTTP 500" or "timeout"; "probe_hung" for a probe whose lease ended; "" if unknown)
--   zset  <prefix>:probes = half-open probe permits (member = token, score = lease expiry)

local EVENTS = {}
-- How soon a call refused because every half-open probe permit is taken may try again (s).
local HALF_OPEN_RETRY_S = 1

-- cfg = {threshold, reset_s, successes_to_close, max_probes}
local function bk_load(name, hkey, zkey, cfg)
  local v = redis.call('HMGET', hkey, 'state', 'failures', 'opened_at', 'successes', 'cause')
  return {
    name = name, h = hkey, z = zkey, cfg = cfg, dirty = false,
    state = v[1] or 'closed',
    failures = tonumber(v[2]) or 0,
    opened_at = tonumber(v[3]) or 0,
    successes = tonumber(v[4]) or 0,
    cause = v[5] or '',
  }
end

local function bk_move(L, to)
  EVENTS[#EVENTS + 1] = L.name .. ':' .. L.state .. ':' .. to
  L.state = to
  L.dirty = true
end

-- closed -> open: `threshold` consecutive failures, the last of them `cause`.
local function bk_trip(L, now, cause)
  bk_move(L, 'open')
  L.opened_at = now
  L.cause = cause
  L.failures = 0
  L.successes = 0
end

-- open -> half_open: reset_s has passed since opened_at. Decided lazily on a request, from
-- the stored time, so it needs no timer and survives restarts.
local function bk_attempt_reset(L)
  bk_move(L, 'half_open')
  L.successes = 0
  redis.call('DEL', L.z)
end

-- half_open -> closed: enough probes succeeded.
local function bk_reclose(L)
  bk_move(L, 'closed')
  L.failures = 0
  L.successes = 0
  redis.call('DEL', L.z)
end

-- half_open -> open: a probe failed at `at` (with `cause`), or hung until its lease ended
-- at `at`.
local function bk_reopen(L, at, cause)
  bk_move(L, 'open')
  L.opened_at = at
  L.cause = cause
  L.successes = 0
  redis.call('DEL', L.z)
end

-- open or half_open -> closed: an operator closed it (the downstream is fixed): counts and
-- probe permits start afresh; a probe still under way settles as a late outcome.
local function bk_force_close(L)
  bk_move(L, 'closed')
  L.cause = ''
  L.failures = 0
  L.successes = 0
  redis.call('DEL', L.z)
end

-- Transitions that are due by `now` without any outcome: a probe whose lease expired is a
-- failure (so no breaker stays half-open behind a hung call), then an open breaker whose
-- reset timeout has elapsed half-opens.
local function bk_refresh(L, now)
  if L.state == 'half_open' then
    local hung = redis.call('ZRANGEBYSCORE', L.z, '-inf', num(now), 'WITHSCORES', 'LIMIT', 0, 1)
    if hung[2] then
      bk_reopen(L, tonumber(hung[2]), 'probe_hung')
    end
  end
  if L.state == 'open' and now - L.opened_at >= L.cfg.reset_s then
    bk_attempt_reset(L)
  end
end

-- 'pass', 'probe' (half-open with a permit free) or 'block' plus seconds until it may pass.
local function bk_admission(L, now)
  if L.state == 'closed' then
    return 'pass', 0
  end
  if L.state == 'open' then
    return 'block', L.opened_at + L.cfg.reset_s - now
  end
  if redis.call('ZCARD', L.z) < L.cfg.max_probes then
    return 'probe', 0
  end
  -- Every probe permit is in use: the trial ends when the probes answer (a call's time, not
  -- their lease, which only bounds a probe that hangs), so try again shortly.
  local first = redis.call('ZRANGE', L.z, 0, 0, 'WITHSCORES')
  return 'block', math.min(HALF_OPEN_RETRY_S, math.max(0, tonumber(first[2]) - now))
end

-- Record one outcome (ok = success). Closed: consecutive-failure count (a success resets
-- it). Half-open: only the trial's own probes decide. Open: late outcomes of calls admitted
-- before it opened change nothing. Returns whether the layer counted the outcome (closed, or
-- one of its probes): false for a late outcome of a call sent before the layer opened.
-- `cause`: what a failure was ("HTTP 500", "timeout"), kept if it opens the layer.
local function bk_record(L, ok, token, now, cause)
  if L.state == 'closed' then
    if ok then
      if L.failures > 0 then
        L.failures = 0
        L.dirty = true
      end
    else
      L.failures = L.failures + 1
      L.dirty = true
      if L.failures >= L.cfg.threshold then
        bk_trip(L, now, cause)
      end
    end
    return true
  elseif L.state == 'half_open' and redis.call('ZREM', L.z, token) == 1 then
    if not ok then
      bk_reopen(L, now, cause)
    else
      L.successes = L.successes + 1
      L.dirty = true
      if L.successes >= L.cfg.successes_to_close then
        bk_reclose(L)
      end
    end
    return true
  end
  return false
end

-- A probe that ends without an outcome (ignored) gives its permit back.
local function bk_release_probe(L, token)
  if L.state == 'half_open' then
    redis.call('ZREM', L.z, token)
  end
end

local function bk_save(L, ttl_ms)
  if L.dirty then
    redis.call('HSET', L.h, 'state', L.state, 'failures', num(L.failures),
      'opened_at', num(L.opened_at), 'successes', num(L.successes), 'cause', L.cause)
    redis.call('PEXPIRE', L.h, ttl_ms)
  end
end

local function bk_cfg(argv, first)
  return {
    threshold = tonumber(argv[first]),
    reset_s = tonumber(argv[first + 1]),
    successes_to_close = tonumber(argv[first + 2]),
    max_probes = tonumber(argv[first + 3]),
  }
end
