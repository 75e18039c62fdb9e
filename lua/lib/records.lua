--[[ lib/records.lua: the holder records and the live counts.

Uses lib/common.lua, lib/numbers.lua, lib/args.lua.
Defines: record_parse, record_format, in_flight, window.

A lease's or a waiter's record in the holders hash (governor.protocol
HolderRecord), parsed and formatted; the leases in flight and the window's
attempts, each derived with ZCOUNT over the live range, never a counter.
]]

-- holders entries: "fence|ttl_ms|since_ms|input|output|level|rank|tenant|holder"
-- (governor.protocol.HolderRecord): input and output are the tokens the
-- lease reserved, {input = , output = , tier = } as a table ("tokens"),
-- the output followed by ",tier" for a lease of a tier with budgets of its
-- own (arg_tokens); level is the leases in flight when it was granted,
-- itself included (0: a waiter); rank and tenant its place ({rank = ,
-- tenant = }, arg_place).
local function record_parse(raw)
  if not raw then return nil end
  -- (a record of a tier, the rare case, is matched again with its ",tier":
  -- one pattern with an optional part costs every record more)
  local fence, ttl, since, input, output, level, rank, tenant, holder =
    string.match(raw, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')
  local tier = nil
  if not fence then
    fence, ttl, since, input, output, tier, level, rank, tenant, holder =
      string.match(raw, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+),([%l%d_]+)|(%d+)|(%d+)|([^|]*)|(.*)$')
    if not fence then return nil end
  end
  -- (the fence and the time never recur: converted, not remembered; no
  -- tokens, the common case, is the one NO_TOKENS, never changed)
  local tokens = NO_TOKENS
  if tier then
    tokens = {input = num(input), output = num(output), tier = tier}
  elseif input ~= '0' or output ~= '0' then
    tokens = {input = num(input), output = num(output)}
  end
  return {fence = tonumber(fence), ttl = num(ttl), since = tonumber(since), tokens = tokens, level = num(level),
    rank = num(rank), tenant = tenant, holder = holder}
end

-- (One concatenation: Lua builds the record once. The fence comes as its
-- digits, which the caller makes once (a grant announces them too); the
-- time rarely recurs, so it is formatted, not remembered.)
local function record_format(fence, ttl, since, tokens, level, rank, tenant, holder)
  local output = dec(tokens.output)
  if tokens.tier and tokens.tier ~= '' then
    output = output .. ',' .. tokens.tier
    CALL.tiers = true  -- a record a client before TIERS_LAYOUT misreads (finish() of lib/fields.lua)
  end
  return fence .. '|' .. dec(ttl) .. '|' .. (since == NOW and NOW_S or int(since)) .. '|' .. dec(tokens.input) .. '|'
    .. output .. '|' .. dec(level) .. '|' .. dec(rank) .. '|' .. tenant .. '|' .. holder
end

local function in_flight()
  return redis.call('ZCOUNT', KEY.leases, LIVE, '+inf')
end

-- The window: (rate-limited, all) attempts of the last window_ms.
local function window()
  local horizon = '(' .. int(NOW - CONFIG.window_ms)
  return redis.call('ZCOUNT', KEY.limited, horizon, '+inf'), redis.call('ZCOUNT', KEY.attempts, horizon, '+inf')
end
