-- Read or update a retry budget outside a ticket (e.g. a failure seen without admission).
-- KEYS: 1 budget hash
-- ARGV: 1 outcome (success|failure|overload|peek), 2 max tokens, 3 token ratio, 4 ttl (ms),
--       5 now (s), 6 refill per second
-- Reply: tokens after the update

local max_tokens = tonumber(ARGV[2])
local now = tonumber(ARGV[5])
local tokens = budget_load(KEYS[1], max_tokens, now, tonumber(ARGV[6]))
local after = budget_after(tokens, ARGV[1], max_tokens, tonumber(ARGV[3]))
if after ~= tokens then
  budget_save(KEYS[1], after, now, tonumber(ARGV[4]))
end
return num(after)
