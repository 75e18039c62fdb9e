--[[ lib/capacity.lua: the policy's capacity changes: pause, resume, recover.

Uses lib/common.lua, lib/fields.lua, lib/decisions.lua, lib/records.lua.
Defines: resume_level, pause, resume, recover.
Capacity is 0 only while
paused; a pause saves the capacity it resumes at (an operator's) or resumes
at the resume level (the policy's).
]]

local function resume_level()
  return math.max(1, math.floor(CONFIG.max_capacity * CONFIG.resume_fraction))
end

local function pause(kind, reason, until_ms)
  if STATE.capacity > 0 then  -- not paused yet
    set('state', 'saved_capacity', STATE.capacity)
  elseif STATE.pause_kind == 'policy' then
    -- An operator takes over a policy pause: the storm is not over, so the
    -- resume starts at the resume level, not where capacity was before it.
    set('state', 'saved_capacity', resume_level())
  end
  set('state', 'paused', 1)
  set('state', 'pause_kind', kind)
  set('state', 'pause_reason', reason)
  set('state', 'paused_until', until_ms)
  set('state', 'capacity', 0)
  set('policy', 'streak', 0)
end

local function resume(capacity)
  set('state', 'paused', 0)
  set('state', 'pause_kind', '')
  set('state', 'pause_reason', '')
  set('state', 'paused_until', 0)
  set('state', 'saved_capacity', 0)
  set('state', 'capacity', math.max(1, math.min(capacity, CONFIG.max_capacity)))
  set('policy', 'streak', 0)
end

-- Time-driven recovery, run by every report, probe and waiter refresh:
-- a policy pause lifts once no rate-limited attempt is left in the window,
-- an operator pause lifts when its duration is over. Capacity is 0 only
-- while paused, so a running governor pays nothing here (a 0 without a
-- pause, a stored value repaired from below its range, resumes).
local function recover(rl)
  if STATE.capacity > 0 then return end
  if STATE.paused == 0 then
    -- 0 without a pause (a stored capacity below its range, read as 0): no
    -- state the rule knows, and nothing would lift it: the resume level
    resume(resume_level())
    log('repair', 'why', 'capacity 0 without a pause (a stored value below its range): resumed at '
      .. STATE.capacity)
    return
  end
  if STATE.pause_kind == 'policy' then
    if rl == nil then rl = window() end
    if rl == 0 then
      resume(resume_level())
      log('resume', 'why', 'no rate-limited attempt left in the window')
    end
  elseif STATE.paused_until > 0 and NOW >= STATE.paused_until then
    resume(STATE.saved_capacity > 0 and STATE.saved_capacity or resume_level())
    log('resume', 'why', 'operator pause duration over')
  end
end
