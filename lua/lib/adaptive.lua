--[[ lib/adaptive.lua: the adaptive policy, POLICIES.adaptive.

Uses lib/common.lua, lib/fields.lua, lib/decisions.lua, lib/records.lua, lib/capacity.lua, lib/policy.lua.
Defines: nothing.
It adds its entry to POLICIES (lib/policy.lua
says what an entry holds). It tells the provider's background refusals from
the fleet's load: a refusal the background share explains cuts nothing, a
cut is checked a window later (a share that did not fall was background:
the cut is undone and the share learnt), and a round admitted together and
mostly refused lands on its accepted count in one step.
]]
-- The adaptive policy's probe: due after probe_wait just below the ceiling
-- (backed off while refused); at or above it (the limit rose) every half
-- interval, the step doubling while the provider keeps accepting, never
-- beyond a quarter of capacity (an overshoot is refused round after round).
local function probe_due(waited)
  local since = NOW - POLICY.probe_at
  if waited and waited < since then since = waited end
  return since >= (STATE.capacity < POLICY.ceiling and POLICY.probe_wait or math.floor(CONFIG.probe_ms / 2))
end

local function probe(why, rl, total)
  set('policy', 'streak', 0)
  set('policy', 'climbing', 0)
  if STATE.capacity >= POLICY.ceiling then set('policy', 'probe_wait', CONFIG.probe_ms) end
  set('policy', 'probe_at', NOW)
  local step = math.min(POLICY.probe_step, math.max(1, math.floor(STATE.capacity / 4)))
  set('policy', 'probe_step', math.min(POLICY.probe_step * 2, CONFIG.max_capacity))
  set_capacity(STATE.capacity + step, why, rl, total, 'ceiling', POLICY.ceiling, 'step', step)
end

-- The highest refusal share of the window read as the provider's
-- background (refusals whatever this fleet's load: another tenant's
-- traffic, a shared quota, an overload); above it a refusal below the
-- ceiling is always the fleet's load.
local NOISE_MAX = 0.2
-- How long after a cut a refusal may still undo it (windows): later, the
-- cut is old news and a refusal is judged afresh.
local VERDICT_WINDOWS = 4

-- The refusals among `n` attempts the background explains: its share of
-- them and two standard deviations (none while no background was seen).
local function explained(share, n)
  local expected = share * n
  return expected + 2 * math.sqrt(expected)
end

-- Whether a refusal may still undo the last cut (within a few windows of it).
local function verdict_open()
  return POLICY.cut_level > 0 and NOW - POLICY.cut_at < VERDICT_WINDOWS * CONFIG.window_ms
end

local function percent(share)
  return string.format('%.1f %%', 100 * share)
end

-- A refusal that moves nothing, and why.
local function no_cut(why, rl, total, level)
  log('refused', 'why', why, 'window_rate_limited', rl, 'window_attempts', total, 'level', level,
    'ceiling', POLICY.ceiling, 'background_ppm', POLICY.background_ppm)
  return false
end

-- A refusal below the ceiling the background does not explain: cut by
-- cut_factor, remember what the cut can be undone to (the background may
-- still have caused it) and count the round in flight at the cut (the
-- leases admitted together with the refused one).
local function cut(capacity, ceiling, why, level, rl, total, fence)
  set('policy', 'cut_from', STATE.capacity)
  set('policy', 'cut_ceiling', POLICY.ceiling)
  set('policy', 'cut_level', level)
  set('policy', 'cut_at', NOW)
  set('policy', 'cut_share_ppm', 0)
  set('policy', 'cut_seq', STATE.event_seq)
  set('policy', 'cut_refused', 0)
  set('policy', 'round_fence', STATE.fence)
  set('policy', 'round_refused', 1)
  set('policy', 'round_at', NOW)
  set('policy', 'ceiling', ceiling)
  set('policy', 'cut_fence', STATE.fence)
  set('policy', 'probe_at', NOW)
  set('policy', 'probe_step', 1)
  set('policy', 'probe_wait', CONFIG.probe_ms)
  set('policy', 'climbing', 1)  -- a refusal before the next probe may mean lower still
  set_capacity(math.max(1, capacity), why, rl, total, 'level', level, 'ceiling', ceiling,
    'lease_fence', fence or '', 'probe_wait', CONFIG.probe_ms)
  return true
end

-- adaptive (the default): a slow start from the resume level; the lowest
-- in-flight level the provider refused (ceiling) is learnt and capacity
-- held just below it; probes step above it now and then; refused below it
-- more than the provider's background explains (the limit fell): one cut
-- per congestion episode by cut_factor, down to the accepted count of a
-- round that came back mostly refused. No news is not bad news: without
-- reports, time at capacity with nothing refused grows it (no_news).
POLICIES.adaptive = {
  config = {'pause_count', 'pause_ratio', 'increase_successes', 'cut_factor', 'probe_ms'},
  state = {'ceiling', 'cut_fence', 'probe_at', 'probe_step', 'probe_wait', 'climbing'},
  later = {'background_ppm', 'cut_from', 'cut_ceiling', 'cut_level', 'cut_at', 'cut_share_ppm', 'round_fence',
    'round_refused', 'round_at', 'cut_seq', 'cut_refused'},
  reset = function()
    set('policy', 'ceiling', 0)
    set('policy', 'cut_fence', STATE.fence)
    set('policy', 'probe_at', NOW)
    set('policy', 'probe_step', 1)
    set('policy', 'probe_wait', CONFIG.probe_ms)
    set('policy', 'climbing', 0)
    set('policy', 'background_ppm', 0)
    set('policy', 'cut_from', 0)
    set('policy', 'cut_ceiling', 0)
    set('policy', 'cut_level', 0)
    set('policy', 'cut_at', 0)
    set('policy', 'cut_share_ppm', 0)
    set('policy', 'round_fence', 0)
    set('policy', 'round_refused', 0)
    set('policy', 'round_at', 0)
    set('policy', 'cut_seq', 0)
    set('policy', 'cut_refused', 0)
    -- A new governor, a reset, a state re-created after a loss: no blind
    -- burst of max_capacity; discover the limit from the resume level. Each
    -- success adds one (success() below, nothing refused yet): a round of
    -- leases that all succeed doubles capacity, as in TCP's slow start, so
    -- max_capacity is reached after about log2(1 / resume_fraction) rounds;
    -- without reports it doubles every probe interval (no_news() below).
    -- No entry of its own in the decision log: the create, recreate or
    -- reset entry that follows carries the capacity it starts at.
    set('state', 'capacity', math.min(STATE.capacity, resume_level()))
  end,
  -- A refusal's Retry-After holds the whole fleet when the refusal says
  -- the fleet as a whole is over (true: a storm, a cut, a round mostly
  -- refused); a refused probe and a refusal the background explains cost
  -- only their call (false), whose caller waits the delay out alone.
  limited = function(rl, total, fence)
    local live = in_flight()
    local level = STATE.capacity
    if live > 0 then level = math.max(1, math.min(live, STATE.capacity)) end
    if fence ~= nil and fence <= POLICY.cut_fence then
      -- A lease admitted before the last cut (or refused probe): counted
      -- in it. One of the round in flight at the last cut is counted in
      -- that round: when most of it comes back refused, the count it
      -- accepted is where the limit is.
      if POLICY.cut_level == 0 or fence > POLICY.round_fence then return false end
      set('policy', 'round_refused', POLICY.round_refused + 1)
      local accepted = math.max(1, POLICY.cut_level - POLICY.round_refused)
      if accepted >= STATE.capacity or POLICY.round_refused <= math.max(POLICY.cut_level / 4,
        1 + explained(POLICY.background_ppm / 1e6, POLICY.cut_level)) then
        return false  -- not most of it: no more than the background and a cut explain
      end
      set('policy', 'ceiling', math.min(POLICY.ceiling, accepted + 1))
      set_capacity(accepted, POLICY.round_refused .. ' of ' .. POLICY.cut_level
        .. ' in flight at the cut refused: down to the accepted count', rl, total, 'level', POLICY.cut_level,
        'ceiling', POLICY.ceiling, 'lease_fence', fence)
      return true
    end
    if level <= 1 and rl >= CONFIG.pause_count and rl >= CONFIG.pause_ratio * total then
      -- Refused even at one in flight, most attempts refused: a real storm.
      set('policy', 'cut_fence', STATE.fence)
      set('policy', 'cut_level', 0)
      policy_pause('rate-limited share ' .. string.format('%.2f', rl / total) .. ' of ' .. total
        .. ' attempts at one in flight', rl, total)
      return true
    end
    -- The refusals of the round the last cut (or refused probe) acted on
    -- stay in the window for a window after it: the news was taken, so a
    -- refusal since is judged by the share net of them (else a start's
    -- overshoot, still in a long window, reads every later refusal as a
    -- lower limit still).
    local counted = 0
    if POLICY.round_at > 0 and NOW - POLICY.round_at < CONFIG.window_ms then
      counted = math.min(POLICY.round_refused, rl - 1)
    end
    local net = rl - counted
    local share = net / total
    if POLICY.ceiling > 0 and level >= POLICY.ceiling and POLICY.climbing == 0 then
      -- A probe refused: back just below the level it was refused at; at
      -- the level refused before, probe less often. It costs that call.
      local wait = CONFIG.probe_ms
      if level == POLICY.ceiling then wait = math.min(POLICY.probe_wait * 2, probe_cap(total)) end
      set('policy', 'ceiling', level)
      set('policy', 'cut_fence', STATE.fence)
      if not verdict_open() then
        -- the round in flight with it: mostly refused, it lands as a cut's
        set('policy', 'cut_level', level)
        set('policy', 'round_fence', STATE.fence)
        set('policy', 'round_refused', 1)
        set('policy', 'round_at', NOW)
      end
      set('policy', 'probe_at', NOW)
      set('policy', 'probe_step', 1)
      set('policy', 'probe_wait', wait)
      set_capacity(math.max(1, level - 1), 'rate-limited at ' .. level .. ' in flight, a probe: back below it',
        rl, total, 'level', level, 'ceiling', level, 'lease_fence', fence or '', 'probe_wait', wait)
      return false
    end
    if net <= explained(POLICY.background_ppm / 1e6, total) then
      -- No more refusals in the window than the background explains: no cut.
      return no_cut('refused at ' .. level .. ' in flight, background refusal share '
        .. percent(POLICY.background_ppm / 1e6) .. ': no cut', rl, total, level)
    end
    local since = NOW - POLICY.cut_at
    local verdict = verdict_open() and share <= NOISE_MAX
    if verdict then
      -- Refused since the cut more often than the background (NOISE_MAX
      -- while none is learnt) explains of the attempts since: a burst at
      -- the level the cut left is the fleet's load, whatever the window's
      -- share says; no window to tell.
      set('policy', 'cut_refused', POLICY.cut_refused + 1)
      local most = POLICY.background_ppm > 0 and POLICY.background_ppm / 1e6 or NOISE_MAX
      verdict = POLICY.cut_refused <= explained(most, STATE.event_seq - POLICY.cut_seq)
    end
    if verdict then
      -- Refused again within a few windows of a cut, at a share the
      -- background could explain: a lower limit, or the background?
      if since < CONFIG.window_ms then
        return no_cut('refused at ' .. level .. ' in flight ' .. since .. ' ms after a cut, refusal share '
          .. percent(share) .. ': a window to tell the background from a lower limit', rl, total, level)
      end
      local ppm = math.floor(share * 1e6)
      if POLICY.round_refused > 1 + explained(share, POLICY.cut_level) then
        -- The round in flight at the cut was refused more than this share
        -- explains: the fleet's load. The cut stands; judged afresh now.
        set('policy', 'cut_level', 0)
      elseif POLICY.cut_share_ppm == 0 then
        -- A window at the level the cut left, refused at this share: one
        -- level lower for a window, to compare (a share that falls with
        -- the level is the fleet's load; one that stays, the background).
        set('policy', 'cut_share_ppm', ppm)
        set('policy', 'cut_at', NOW)
        set('policy', 'cut_seq', STATE.event_seq)
        set('policy', 'cut_refused', 0)
        set('policy', 'cut_fence', STATE.fence)
        set('policy', 'probe_at', NOW + CONFIG.window_ms)  -- held there a window (success())
        set('policy', 'climbing', 1)
        set_capacity(math.max(1, math.floor(level * CONFIG.cut_factor)), 'refused at ' .. level
          .. ' in flight a window after a cut, share ' .. percent(share) .. ': a level lower, to compare',
          rl, total, 'level', level, 'ceiling', POLICY.ceiling)
        return false
      elseif ppm * 2 < POLICY.cut_share_ppm then
        -- The share fell with the level: the fleet's load; the cuts stand.
        set('policy', 'cut_level', 0)
        return no_cut('refused at ' .. level .. ' in flight, share ' .. percent(share) .. ' down from '
          .. percent(POLICY.cut_share_ppm / 1e6) .. ' a level higher: the fleet\'s load, the cut stands', rl, total, level)
      else
        -- A level lower, refused as often: the cuts bought nothing. The
        -- share is the background's (the mean of the last estimate and
        -- this share); undo them.
        if POLICY.background_ppm > 0 then ppm = math.floor((POLICY.background_ppm + ppm) / 2) end
        set('policy', 'background_ppm', ppm)
        -- (a cut of the slow start: the slow start again, with no ceiling;
        -- a round it overshoots with lands on its accepted count)
        set('policy', 'ceiling', POLICY.cut_ceiling)
        set('policy', 'cut_level', 0)
        set('policy', 'climbing', 0)
        set('policy', 'probe_at', NOW)
        set('policy', 'probe_wait', CONFIG.probe_ms)
        set_capacity(math.max(STATE.capacity, POLICY.cut_from), 'refused at ' .. level .. ' in flight, share '
          .. percent(share) .. ' as a level higher: background refusal share ' .. percent(ppm / 1e6)
          .. ', cut undone', rl, total, 'level', level, 'ceiling', POLICY.ceiling, 'background_ppm', POLICY.background_ppm)
        return false
      end
    end
    if POLICY.climbing == 1 and POLICY.ceiling > 0 then
      -- Refused again climbing back after a cut: the limit is lower still.
      local capacity = math.floor(level * CONFIG.cut_factor)
      return cut(capacity, capacity + 1, 'rate-limited at ' .. level .. ' in flight again after a cut: cut',
        level, rl, total, fence)
    end
    -- Refused below the lowest level refused so far (or the first 429).
    return cut(math.floor(level * CONFIG.cut_factor), level, 'rate-limited at ' .. level .. ' in flight: cut',
      level, rl, total, fence)
  end,
  -- A refusal the provider says is no load signal (an overload, a 529,
  -- headers showing requests and tokens remaining): not one of the
  -- window's refusals, so the fleet's own are judged without it; it
  -- cuts nothing and holds nobody but its caller.
  background = function(rl, total)
    local live = in_flight()
    local level = live > 0 and math.max(1, math.min(live, STATE.capacity)) or STATE.capacity
    no_cut('refused at ' .. level .. ' in flight, the provider says not for this fleet\'s load: background, no cut',
      rl, total, level)
  end,
  -- At the max a success changes nothing: the streak is 0 there (every
  -- capacity change clears it, and new_max() when it leaves capacity at the
  -- max), so a quiet success reads none of the policy's state.
  quiet = function() return STATE.capacity >= CONFIG.max_capacity end,
  quiet_state = {},
  success = function(rl, total)
    if STATE.capacity >= CONFIG.max_capacity then return end
    set('policy', 'streak', POLICY.streak + 1)
    if POLICY.probe_at > NOW then
      -- A window held a level lower, to compare the share refused there
      -- with the share a level higher (limited()): no growth, no probe.
      return
    elseif POLICY.ceiling == 0 or STATE.capacity + 1 < POLICY.ceiling then
      -- Nothing refused yet (the slow start: one more per success doubles
      -- capacity per round of leases), or below the ceiling: one more.
      set('policy', 'streak', 0)
      set_capacity(STATE.capacity + 1, 'success below the ceiling: increase', rl, total, 'ceiling', POLICY.ceiling)
    elseif POLICY.streak >= CONFIG.increase_successes and probe_due() then
      probe('probe above the ceiling', rl, total)
    end
  end,
  no_news = function(waited)
    if POLICY.ceiling == 0 then
      -- The slow start without reports: every probe interval spent with
      -- callers waiting at capacity and nothing refused doubles capacity.
      local since = math.min(NOW - POLICY.probe_at, waited)
      if since < CONFIG.probe_ms then return nil end
      return function(rl, total)
        set('policy', 'probe_at', NOW)
        set_capacity(STATE.capacity * 2, 'nothing refused for ' .. since .. ' ms, callers waiting at capacity: double',
          rl, total, 'ceiling', 0)
      end
    elseif probe_due(waited) then
      -- A ceiling learnt, but nothing refused for a window: the probe a
      -- streak of successes would make, due by time alone.
      return function(rl, total)
        probe('nothing refused in the window, callers waiting at capacity: probe', rl, total)
      end
    end
    return nil
  end,
  new_max = function(before)
    -- A lower max_capacity applies at once; a higher one is approached as
    -- any ceiling is (the slow start, probes): what was learnt is kept.
    if STATE.capacity > CONFIG.max_capacity then set('state', 'capacity', CONFIG.max_capacity) end
    if STATE.capacity >= CONFIG.max_capacity then set('policy', 'streak', 0) end  -- at the max the streak is 0 (quiet)
  end,
}
