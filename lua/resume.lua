--[[ resume.lua: operator resume; lifts any pause and the retry-after hold,
and the recovery hold only when asked by name.

After an operator pause capacity returns to where it was; after a policy
pause it starts at the resume level, max(1, floor(max_capacity * resume_fraction)).
A recovery hold (after a loss, lib/origin.lua) stays unless ARGV[3] is
'lift-hold': holders from before the loss may still be running unseen, so
ending it is an explicit choice. The decision log gets a 'resume' entry
only when something changed: a pause was lifted, a running hold cleared.

Uses    lib/common.lua, lib/call.lua, lib/fields.lua, lib/decisions.lua, lib/capacity.lua,
        lib/upkeep.lua, lib/queue.lua, lib/admin.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
  ARGV[3] lift     '' | 'lift-hold'   'lift-hold': end the recovery hold too
Reply
  the status reply of status.lua, after the resume
  {SCHEMA, 'missing'}   no such governor: run init.lua, then call again
]]

local lift = ARGV[3] or ''
if lift ~= '' and lift ~= 'lift-hold' then fail('BADARG', 'lift must be lift-hold or empty, got ' .. lift) end
-- step: the state
clock()
check_types()
if not load_all() then return missing_reply() end
keep_alive()
-- step: the writes
local was_paused = STATE.paused == 1
local held_until = STATE.not_before
local was_holding = held_until > NOW
local recovery = STATE.hold_until or 0
local lifted, lifted_why = 0, STATE.hold_reason or ''
if was_paused then
  if STATE.pause_kind == 'operator' and STATE.saved_capacity > 0 then
    resume(STATE.saved_capacity)
  else
    resume(resume_level())
  end
end
if recovery > NOW and lift == 'lift-hold' then
  set('state', 'hold_until', 0)
  set('state', 'hold_reason', '')
  lifted, recovery = recovery, 0
end
local keep = recovery > NOW and recovery or 0
if held_until ~= keep then set('state', 'not_before', keep) end
if was_paused or (was_holding and keep < held_until) then
  log('resume', 'why', lifted > 0 and 'operator, lifting the recovery hold: ' .. lifted_why or 'operator',
    'was_paused', was_paused and '1' or '0', 'not_before', was_holding and held_until or 0,
    'recovery_hold_kept', keep)
end
reclaim(true)
grant()
return finish(status_reply())
