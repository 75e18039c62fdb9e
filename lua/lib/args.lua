--[[ lib/args.lua: the operations' arguments, each checked before anything.

Uses lib/common.lua, lib/numbers.lua.
Defines: NO_TOKENS, arg_int, arg_in, arg_id, arg_label, arg_tokens, arg_place.

Every argument is checked when it is read, before the call's first write:
a malformed one fails the call (GOVERNOR_BADARG, what it must be and what
came).
]]

local NO_TOKENS = {input = 0, output = 0}  -- no tokens, the common case (never changed)

-- ARGV[i] as an integer >= min (0); `unique`: a value that never recurs
-- (a fence), converted without the memo.
local function arg_int(i, what, min, unique)
  local v
  if unique then v = tonumber(ARGV[i]) else v = num(ARGV[i]) end
  if v == nil or v ~= v or v % 1 ~= 0 or v < (min or 0) or v > MAX_INT then
    fail('BADARG', what .. ' must be an integer in [' .. (min or 0) .. ', 2^53], got ' .. tostring(ARGV[i]))
  end
  return v
end

-- ARGV[i], the ranged argument `name`, as an integer within its kind
-- (ARGS, generated from governor.protocol.ARGUMENTS: the kind of the field
-- it ends up in, so that no call stores what the state's reader refuses).
local function arg_in(i, name)
  local kind = ARGS[name]
  local v = num(ARGV[i])
  if v == nil or v ~= v or v % 1 ~= 0 or v < kind[2] or v > kind[3] then
    fail('BADARG', name .. ' must be an integer in [' .. kind[2] .. ', ' .. kind[3] .. '], got ' .. tostring(ARGV[i]))
  end
  return v
end

-- (An id of letters and digits alone, as the clients make them, is told
-- by a one-class pattern first: a quarter cheaper than the set's,
-- scripts/lua_costs.py.)
local function arg_id(i, what)
  local v = ARGV[i]
  if v == nil or #v > 128 or not (string.find(v, '^%w+$') or string.find(v, '^[%w%-_.:]+$')) then
    fail('BADARG', what .. ' must be 1-128 characters of [A-Za-z0-9-_.:], got ' .. tostring(v))
  end
  return v
end

local function arg_label(i)
  local v = ARGV[i]
  if v == nil or #v > 200 then fail('BADARG', 'holder label must be at most 200 bytes') end
  return v
end

-- ARGV[i]: tokens as "input,output" or "input,output,tier"
-- (governor.budgets.Tokens.arg), '' for none. The tier, when said, is
-- kept as the budgets count it: a tier with kinds of its own (BUDGET_COST's
-- [4]) by its name, any other as '' (the standard tier's); not said: nil.
local function arg_tokens(i, what)
  local v = ARGV[i]
  if v == nil or v == '' then return NO_TOKENS end
  local input, output = string.match(v, '^(%d+),(%d+)$')
  local tier = nil
  if not input then input, output, tier = string.match(v, '^(%d+),(%d+),(%l[%l%d_]*)$') end
  local a, b = tonumber(input), tonumber(output)
  if not a or a > MAX_INT or b > MAX_INT or (tier and #tier > 32) then
    fail('BADARG', what .. ' must be "input,output" integer tokens in [0, 2^53], or "input,output,tier" with a tier'
      .. ' of 1-32 of [a-z0-9_], got ' .. tostring(v))
  end
  if tier then
    local apart = ''
    for _, cost in pairs(BUDGET_COST) do if cost[4] == tier then apart = tier end end
    return {input = a, output = b, tier = apart}
  end
  return {input = a, output = b}
end

-- ARGV[i], ARGV[i + 1], ARGV[i + 2]: a caller's class rank (0: the
-- highest), tenant and the tenant's weight (GovernorConfig.weight_of). A
-- place is never changed once made: each is remembered by the strings sent
-- (tenant, rank, weight; at most 1,024), so a caller's next call makes none.
local PLACES, remember_place = memo(1024)
local function arg_place(i)
  local ranks = PLACES[ARGV[i + 1]]
  local weights = ranks and ranks[ARGV[i]]
  local known = weights and weights[ARGV[i + 2]]
  if known then return known end
  local rank, weight = num(ARGV[i]), num(ARGV[i + 2])
  if rank == nil or rank ~= math.floor(rank) or rank < 0 or rank >= MAX_CLASSES then
    fail('BADARG', 'rank must be an integer in [0, ' .. (MAX_CLASSES - 1) .. '], got ' .. tostring(ARGV[i]))
  end
  local tenant = ARGV[i + 1]
  if tenant == nil or #tenant > 64 or not string.find(tenant, '^[%w%-_.:]+$') then
    fail('BADARG', 'tenant must be 1-64 characters of [A-Za-z0-9-_.:], got ' .. tostring(tenant))
  end
  if weight == nil or weight ~= math.floor(weight) or weight < 1 or weight > MAX_WEIGHT then
    fail('BADARG', 'weight must be an integer in [1, ' .. MAX_WEIGHT .. '], got ' .. tostring(ARGV[i + 2]))
  end
  -- (with the fair queue's share name and tag step: enqueue's, made once)
  return remember_place({rank = rank, tenant = tenant, weight = weight, share = rank .. ':' .. tenant,
    step = math.ceil(QUANTUM / weight)}, tenant, ARGV[i], ARGV[i + 2])
end
