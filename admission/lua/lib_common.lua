-- Shared helpers. Python concatenates the lib_*.lua files a script needs in front of its
-- body (Redis scripts cannot `require`), so each script is still one atomic unit.

-- Numbers cross into Redis commands and back to Python as strings: "%.17g" round-trips a
-- double exactly, where Lua's default conversion keeps only 14 digits (a timestamp like
-- 1700000000.123456 would lose its microseconds).
local function num(x)
  return string.format('%.17g', x)
end
