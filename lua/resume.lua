--[[ resume.lua: operator resume; lifts any pause and the retry-after hold.

After an operator pause capacity returns to where it was; after a policy
pause it starts at the resume level, max(1, floor(max_capacity * resume_fraction)).
The decision log gets a 'resume' entry only when something changed: a
pause was lifted or a running hold (not_before in the future) cleared.

Uses    lib/common.lua, lib/capacity.lua, lib/upkeep.lua, lib/queue.lua, lib/admin.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
Reply
  the status reply of status.lua, after the resume
  {SCHEMA, 'missing'}   no such governor: run init.lua, then call again
]]

clock()
check_types()
if not load_all() then return missing_reply() end
keep_alive()
local was_paused = S.paused == 1
local held_until = S.not_before
local was_holding = held_until > NOW
if was_paused then
  if S.pause_kind == 'operator' and S.saved_capacity > 0 then resume(S.saved_capacity) else resume(resume_level()) end
end
if held_until ~= 0 then set('state', 'not_before', 0) end
if was_paused or was_holding then
  log('resume', 'why', 'operator', 'was_paused', was_paused and '1' or '0',
    'not_before', was_holding and held_until or 0)
end
reclaim(true)
grant()
return finish(status_reply())
