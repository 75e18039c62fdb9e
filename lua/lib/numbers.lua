--[[ lib/numbers.lua: numbers read and written, each conversion remembered.

Uses lib/common.lua.
Defines: num, int, dec.

num(s) is tonumber(s) remembered; int(x) an integer as its digits (what
save() stores and the hot paths pass to redis.call); dec(x) the same for an
integer that recurs (a TTL, a token count, a level, a rank), remembered.
Lua converts a string with the C library's strtod and formats a number with
string.format, each far dearer than a table lookup (scripts/lua_costs.py
measures them), and the same few values come back call after call: each
memo is a bounded one (memo() of lib/common.lua).
]]

-- A stored or sent number as Lua's number, or nil: tonumber() remembered
-- (at most 4,096).
local NUMBERS, remember_number = memo(4096)
local function num(s)
  if s == nil then return nil end
  local v = NUMBERS[s]
  if v == nil then v = remember_number(tonumber(s) or false, s) end
  return v or nil
end

-- An integer inside a string: Lua's own conversion turns a fence (above
-- 1e14) into "1.7e+15". Redis converts a number passed to redis.call
-- exactly, but with "%.17g", dearer than a string (scripts/lua_costs.py):
-- the hot paths pass their scores and deadlines as int(x). A reply may
-- hold numbers. The integers the hot paths format (times in ms,
-- deadlines, fences) share all but their last four digits with the last
-- few they formatted: those are remembered (at most 4,096), the last four
-- made of two pairs of digits (PAIRS), one concatenation.
local HIGH, remember_high = memo(4096)
local PAIRS = {}
for i = 0, 99 do PAIRS[i] = (i < 10 and '0' or '') .. i end
local function int(x)
  if x < 10000 or x > MAX_INT or x % 1 ~= 0 then return string.format('%d', x) end
  local low = x % 10000
  local high = (x - low) / 10000
  local head = HIGH[high] or remember_high(string.format('%d', high), high)
  local tens = low % 100
  return head .. PAIRS[(low - tens) / 100] .. PAIRS[tens]
end

-- An integer that recurs (a TTL, a token count, a level, a rank) as a
-- decimal string, remembered (at most 4,096).
local DECIMALS, remember_decimal = memo(4096)
local function dec(x)
  return DECIMALS[x] or remember_decimal(int(x), x)
end
