-- Close breaker layers by an operator's hand (`Admission.reset_breakers`).
-- KEYS: per layer, its state hash and its probes zset. ARGV: 1 state ttl (ms), then per
-- layer its name (`global` or `tenant`).
-- Returns, per layer, the state it had ('closed': left as it was).
local ttl_ms = tonumber(ARGV[1])
local was = {}
for i = 1, #KEYS / 2 do
  local L = bk_load(ARGV[i + 1], KEYS[2 * i - 1], KEYS[2 * i], nil)
  was[i] = L.state
  if L.state ~= 'closed' then
    bk_force_close(L)
    bk_save(L, ttl_ms)
  end
end
return was
