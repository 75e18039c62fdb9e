--[[ lib/policy.lua: the adaptive policy (SPEC section 4) of report.lua.

Uses lib/common.lua and lib/admission.lua. `record(outcome, fence)` adds
one attempt to the window and applies the governor's policy: the seed's
rules exactly (policy 'seed') or the default ('adaptive'), every number
read from the state (see lib/config.lua).
]]

want_all()  -- it may read any field of the state

-- The adaptive policy: the seed's rules (policy 'seed') or the default
-- ('adaptive'). `fence` is the reporting lease's fence, or nil.
local function set_cap(cap, why, rl, total, ...)
  cap = math.max(0, math.min(cap, S.max))
  if cap ~= S.cap then
    local before = S.cap
    set('cap', cap)
    log('capacity', 'from', before, 'why', why, 'window_limited', rl, 'window_attempts', total, ...)
  end
end

local function policy_pause(why, rl, total)
  local before = S.cap
  pause('policy', 'waiting for provider rate-limit recovery', 0)
  log('pause', 'from', before, 'why', why, 'window_limited', rl, 'window_attempts', total)
end

local function on_limited_seed(rl, total)
  if rl >= S.pause_count then
    policy_pause(rl .. ' rate-limited attempts in the window', rl, total)
  elseif rl >= S.dec_count or (total >= S.ratio_min and rl / total > S.dec_ratio) then
    set_cap(math.max(1, math.floor(S.cap * S.dec_factor)), 'rate-limited: decrease', rl, total)
  end
end

-- The default policy on a 429. `fence` is the reporting lease's fence, or
-- nil (then the 429 counts as news, and the level is capacity).
local function on_limited_adaptive(rl, total, fence)
  if fence ~= nil and fence <= S.cut_fence then
    -- A lease admitted before the last cut was counted in that cut's level:
    -- no new cut, but its 429 says the provider took one fewer than that.
    if S.ceiling > 1 then
      set('ceiling', S.ceiling - 1)
      set_cap(math.min(S.cap, S.ceiling), 'rate-limited lease admitted before the cut: level one lower',
        rl, total, 'ceiling', S.ceiling)
    end
    return
  end
  local live = in_flight()
  local level = S.cap
  if live > 0 then level = math.max(1, math.min(live, S.cap)) end
  if level <= 1 and rl >= S.pause_count and rl >= S.pause_ratio * total then
    -- Refused even at one in flight, most attempts refused: a real storm.
    set('cut_fence', S.fence)
    policy_pause('rate-limited share ' .. string.format('%.2f', rl / total) .. ' of ' .. total
      .. ' attempts at one in flight', rl, total)
    return
  end
  local cap = math.max(1, math.floor(level * S.cut_factor))
  local ceiling, why
  local wait = S.probe_wait
  if S.climb == 1 then
    -- Refused again before the next probe: the remembered level was too
    -- high, so do not climb back to it.
    ceiling, wait = cap, S.probe_ms
    why = 'rate-limited at ' .. level .. ' before probing: remembered level too high, cut'
  else
    ceiling = level
    if S.ceiling > 0 and level >= S.ceiling then
      -- A probe refused at the level refused before: probe less often.
      wait = math.min(wait * 2, math.max(S.probe_ms, S.window_ms / 2))
    else
      wait = S.probe_ms
    end
    why = 'rate-limited at ' .. level .. ' in flight: cut'
  end
  set('ceiling', ceiling)
  set('cut_fence', S.fence)
  set('probe_step', 1)
  set('probe_at', NOW)
  set('probe_wait', wait)
  set('climb', 1)
  set_cap(cap, why, rl, total, 'level', level, 'ceiling', ceiling, 'lease_fence', fence or '',
    'probe_wait', wait)
end

local function on_success_seed(rl, total)
  set('streak', S.streak + 1)
  if S.streak >= S.inc_succ then
    set('streak', 0)
    set_cap(S.cap + 1, S.inc_succ .. ' successes in a row: increase', rl, total)
  end
end

local function on_success_adaptive(rl, total)
  set('streak', S.streak + 1)
  if S.cap >= S.max then
    set('streak', 0)
    return
  end
  if S.ceiling == 0 or S.cap + 1 < S.ceiling then
    -- Below the level of the last pushback: climb back at once.
    set('streak', 0)
    set_cap(S.cap + 1, 'success below the last pushback level: increase', rl, total, 'ceiling', S.ceiling)
  elseif S.streak >= S.inc_succ and NOW - S.probe_at >= (S.cap < S.ceiling and S.probe_wait or S.probe_ms) then
    -- At or above it: probe carefully, a step per probe interval, the step
    -- doubling while the provider keeps accepting. Just below the level of
    -- the last refusal, probes wait probe_wait (backed off while refused);
    -- at or above it the limit rose: discover it at the base interval.
    set('streak', 0)
    set('climb', 0)
    if S.cap >= S.ceiling then set('probe_wait', S.probe_ms) end
    set('probe_at', NOW)
    local step = S.probe_step
    set('probe_step', math.min(S.probe_step * 2, S.max))
    set_cap(S.cap + step, 'probe above the last pushback level', rl, total, 'ceiling', S.ceiling, 'step', step)
  end
end

-- Record one reported attempt and apply the policy. outcome is 's'
-- (success), 'r' (rate-limited) or 'e' (other error).
local function record(outcome, fence)
  local rl, total = window()
  set('evseq', S.evseq + 1)
  local member = S.evseq .. ':' .. outcome
  if outcome == 'r' then
    redis.call('ZADD', K.limited, NOW, member)
    if rl == 0 then created(K.limited) end
    rl = rl + 1
  end
  redis.call('ZADD', K.attempts, NOW, member)
  if total == 0 then created(K.attempts) end
  total = total + 1
  if outcome == 'r' then
    set('streak', 0)
    if S.paused == 1 then return end       -- further 429s while paused change nothing
    if S.policy == 'seed' then on_limited_seed(rl, total) else on_limited_adaptive(rl, total, fence) end
  elseif outcome == 's' then
    if S.paused == 1 then
      recover(rl)
    elseif S.policy == 'seed' then
      on_success_seed(rl, total)
    else
      on_success_adaptive(rl, total)
    end
  else
    recover(rl)
  end
end

