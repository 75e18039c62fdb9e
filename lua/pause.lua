--[[ pause.lua: operator pause; stops new admissions, holders keep running.

An operator pause is lifted by resume.lua or when its duration is over,
never by the policy's window-drain rule.

Uses    lib/common.lua, lib/args.lua, lib/call.lua, lib/fields.lua, lib/decisions.lua,
        lib/capacity.lua, lib/admin.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now          int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel      string        unused (common to every script)
  ARGV[3] reason       string        shown to queued callers and operators
  ARGV[4] duration_ms  int ms >= 0   0: until resumed
Reply
  the status reply of status.lua, after the pause
  {SCHEMA, 'missing'}   no such governor: run init.lua, then call again
]]

local reason = ARGV[3]
if reason == nil or reason == '' or #reason > 500 then
  fail('BADARG', 'reason must be 1-500 bytes')
end
local duration = arg_int(4, 'duration_ms')
-- step: the state
clock()
check_types()
if not load_all() then return missing_reply() end
keep_alive()

-- step: the writes
local until_ms = 0
if duration > 0 then until_ms = NOW + duration end
local before = STATE.capacity
pause('operator', reason, until_ms)
log('pause', 'from', before, 'why', 'operator: ' .. reason, 'until', until_ms)
return finish(status_reply())
