--[[ set_max.lua: change max_capacity at run time.

Not paused: capacity = max_capacity = n at once, up or down, and the
adaptive memory is forgotten. Paused: capacity stays 0 and the resume uses
the new n; a pause is never lifted by this.

KEYS    the governor's eight keys, see common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
  ARGV[3] n        int >= 1      the new max_capacity
Reply
  the status reply of status.lua, after the change
  {1, 'missing'}   no such governor: run init.lua, then call again
]]

local n = arg_int(3, 'max_capacity', 1)
if n > 1000000 then fail('BADARG', 'max_capacity must be <= 1000000') end
if not load_state() then return missing_reply() end

local before = S.max
set('max', n)
if S.paused == 1 then
  if S.saved_cap > n then set('saved_cap', n) end
else
  set('cap', n)
  set('ceiling', 0)
  set('cut_fence', S.fence)
end
log('set_max', 'from', int(before), 'to', int(n), 'why', 'operator')
reclaim()
grant()
return finish(status_reply())
