--[[ lib/decisions.lua: the decision log.

Uses lib/common.lua.
Defines: log.

Every change of capacity, pause, hold or budget is logged in the events
stream (XADD, capped at about log_length entries): what changed, why, and
the figures behind it (governor/views.py reads it).
]]

-- log(kind, name, value, ...): an entry of `kind` with the call's time,
-- capacity and pause, then the pairs given. Needs CONFIG.log_length (prepare()
-- of lib/upkeep.lua reads it).
local function log(kind, ...)
  redis.call('XADD', KEY.events, 'MAXLEN', '~', CONFIG.log_length, '*',
    'kind', kind, 'at', NOW, 'capacity', STATE.capacity, 'paused', STATE.capacity == 0 and 1 or 0, ...)
end
