--[[ spend.lua: the spend (usd) budgets: reserve, settle, approve.

Uses    lib/common.lua, lib/numbers.lua, lib/args.lua, lib/call.lua, lib/fields.lua,
        lib/decisions.lua, lib/origin.lua, lib/spending.lua
KEYS    the governor's keys, see lib/common.lua (this writes spend, state's
        spend_until and the events)
ARGV
  ARGV[1] now        int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel    string        unused (common to every script)
  ARGV[3] op         'reserve' | 'settle' | 'approve'
  ARGV[4] id         reserve, settle: the call's id ([A-Za-z0-9-_.:], <= 128);
                     approve: the budget's name
  ARGV[5] tenant     reserve, settle: the caller's tenant; approve: the scope
                     ('*' the fleet, else a tenant)
  ARGV[6] amounts    "usd" or "usd,requests,tokens" integers (usd in
                     micro-dollars): reserve, the most the call can take (the
                     estimate's price at the tier asked); settle, what it took
                     (usage at the tier served, or what the provider bills a
                     refused call); approve, the amount (in the budget's unit)
                     added to the limit until the window resets
  ARGV[7] extra      reserve: ms the reservation is kept unsettled (then it is
                     kept as spent); settle: the amounts the client reserved
                     (used when the reservation was already forgotten); approve: ''
  ARGV[8] count      the budgets that follow
  ARGV[9..]          8 per budget: name, limit (its unit per window, 0:
                     none for the fleet), tenant limits ("tenant=amount,..."),
                     window ("r:<slot_ms>:<slots>" rolling, "c:<b0>:<b1>:<b2>:<b3>"
                     calendar boundaries in ms), soft_ppm (the threshold's
                     share, per million; 0 none), pause ('1': refuse past the
                     threshold until approved), label (the window as
                     governor.spend.Window names it), unit (usd, requests, tokens)
Reply
  {SCHEMA, 'reserved'} | {SCHEMA, 'settled'} | {SCHEMA, 'approved', until_ms}
  {SCHEMA, 'spend_exhausted', budget, scope, spent, limit, resets_at_ms, why}
       why: 'limit' (the window's limit), 'threshold' (paused at the soft
       threshold until approved), 'never' (above the whole limit: resets_at 0)
  {SCHEMA, 'missing'}   no such governor: run init.lua, then call again
A reservation counts in every scope's window at once; the charge moves it
(what was not used goes back to the slot it was taken from; more is charged
to the current slot; nothing goes back to a window that has ended).
]]

local op = ARGV[3]
if op ~= 'reserve' and op ~= 'settle' and op ~= 'approve' then
  fail('BADARG', 'op must be reserve, settle or approve, got ' .. tostring(op))
end
local id = arg_id(4, op == 'approve' and 'budget' or 'id')
local tenant = ARGV[5]
if not tenant or #tenant > 64 or not string.find(tenant, '^[%w%-_.:*]+$') then
  fail('BADARG', 'tenant must be 1-64 characters of [A-Za-z0-9-_.:] (or * for the fleet), got ' .. tostring(tenant))
end
local amounts = spend_amounts(6, 'amounts')
local extra, reserved_by_client = 0, nil
if op == 'reserve' then extra = arg_int(7, 'keep_ms') elseif op == 'settle' then reserved_by_client = spend_amounts(7, 'reserved') end
local budgets = spend_budgets(9, arg_int(8, 'count'))

-- step: the state
clock()
if not load({'epoch', 'capacity'}) then return missing_reply() end
for _, budget in ipairs(budgets) do budget.w = spend_window(budget) end  -- (a bad window fails before any write)
read_more('config', 'log_length', 'idle_ms')
guard(KEY.spend, KEY.events)
local lost_at = spend_loss()

-- Each budget's scopes the call counts in: the fleet's (limit > 0) and the
-- caller's tenant (when it has a limit of its own), each {field, limit, entry}.
local function scopes_of(budget, w, who)
  local list = {}
  if who == '*' or budget.limit > 0 then list[#list + 1] = {scope = '*', limit = budget.limit} end
  if who ~= '*' then
    local found = string.match(',' .. budget.tenants .. ',', ',' .. string.gsub(who, '%p', '%%%0') .. '=(%d+),')
    if found then list[#list + 1] = {scope = who, limit = tonumber(found)} end
  end
  for _, s in ipairs(list) do
    s.field = 'b:' .. budget.name .. ':' .. s.scope
    s.entry = spend_entry(redis.call('HGET', KEY.spend, s.field))
    local unreadable = not s.entry
    if unreadable then  -- an entry that does not parse: its window counted as spent in full, and said
      s.entry = spend_entry(nil)
      log('spend-repair', 'budget', budget.name, 'scope', s.scope, 'why', 'unreadable entry: its window counts as spent')
    end
    spend_prune(s.entry, w)
    s.add = spend_approval(budget.name, s.scope)
    s.limit = s.limit + (s.add or 0)
    -- (an entry not written since the loss, nor counted in it yet, counts the window in full)
    if unreadable or (lost_at > 0 and lost_at >= w.start and s.entry.seen <= lost_at and s.entry.lost ~= lost_at) then
      s.entry.slots[#s.entry.slots + 1] = {w.cur, s.limit}
      s.entry.lost = unreadable and NOW or lost_at
    end
  end
  return list
end

-- A charge of `delta` to an entry: to the slot of `key` while it is in
-- the window, else (more than reserved only) to the current slot.
local function charge(entry, key, delta, w)
  for _, slot in ipairs(entry.slots) do
    if key and slot[1] == key then
      slot[2] = math.max(0, slot[2] + delta)
      return
    end
  end
  if delta <= 0 then return end
  for _, slot in ipairs(entry.slots) do
    if slot[1] == w.cur then
      slot[2] = slot[2] + delta
      return
    end
  end
  entry.slots[#entry.slots + 1] = {w.cur, delta}
end

-- The soft threshold crossed (once per window): logged, with the figures.
local function note(budget, s, before, w)
  local at = budget.soft * s.limit
  local spent = entry_spent(s.entry)
  if budget.soft > 0 and s.limit > 0 and spent >= at and (before < at or s.entry.noted == 0) and s.entry.noted < w.start then
    s.entry.noted = NOW
    log('spend-threshold', 'budget', budget.name, 'scope', s.scope, 'unit', budget.unit, 'spent', int(spent),
      'limit', int(s.limit),
      'share', string.format('%.2f', spent / s.limit), 'call', id,
      'why', 'spent ' .. string.format('%d%%', budget.soft * 100) .. ' of the window\'s limit'
        .. (budget.pauses and ': paused until an operator approves more (governor spend approve)' or ''))
  end
end

local keep = 0
local function kept(w)
  keep = math.max(keep, (w.finish or (w.cur + 1) * w.slot_ms + w.n * w.slot_ms) + CONFIG.idle_ms)
end

-- step: an approval
if op == 'approve' then
  local budget = budgets[1]
  if not budget or budget.name ~= id then fail('BADARG', 'approve takes the definition of budget ' .. id) end
  local w = budget.w
  local until_ms = w.finish or NOW + w.n * w.slot_ms
  local field = 'a:' .. id .. ':' .. tenant
  local was = spend_approval(id, tenant) or 0
  redis.call('HSET', KEY.spend, field, int(until_ms) .. '|' .. int(was + amounts[1]))
  log('spend-approved', 'budget', id, 'scope', tenant, 'add', int(amounts[1]), 'unit', budget.unit, 'until', int(until_ms),
    'why', 'an operator approved more: the limit is raised and the threshold does not pause until the window resets')
  kept(w)
  spend_keep(keep)
  return finish({SCHEMA, 'approved', until_ms})
end

-- step: a reservation
spend_forget()
if op == 'reserve' then
  local plan = {}
  for _, budget in ipairs(budgets) do
    local definition = int(budget.limit) .. '|' .. budget.label .. '|' .. int(budget.soft * 1000000) .. '|'
      .. (budget.pauses and '1' or '0') .. '|' .. budget.tenants .. '|' .. budget.unit
    local amount = amounts[budget.slot]
    if redis.call('HGET', KEY.spend, 'd:' .. budget.name) ~= definition then
      redis.call('HSET', KEY.spend, 'd:' .. budget.name, definition)
    end
    local w = budget.w
    kept(w)
    for _, s in ipairs(scopes_of(budget, w, tenant)) do
      local spent = entry_spent(s.entry)
      local why = nil
      if amount > s.limit then
        why = 'never'
      elseif spent + amount > s.limit then
        why = 'limit'
      elseif budget.pauses and not s.add and budget.soft > 0 and spent + amount > budget.soft * s.limit then
        why = 'threshold'
      end
      if why then
        for _, done in ipairs(plan) do redis.call('HSET', KEY.spend, done.s.field, entry_format(done.s.entry)) end
        redis.call('HSET', KEY.spend, s.field, entry_format(s.entry))
        spend_keep(keep)
        local resets = why == 'threshold' and (w.finish or spend_resets(s.entry, w, amount, budget.soft * s.limit))
          or spend_resets(s.entry, w, amount, s.limit)
        return finish({SCHEMA, 'spend_exhausted', budget.name, s.scope, int(spent), int(s.limit), int(resets), why})
      end
      plan[#plan + 1] = {budget = budget, s = s, w = w, before = spent, amount = amount}
    end
  end
  local names, last = {}, nil
  for _, p in ipairs(plan) do
    charge(p.s.entry, p.w.cur, p.amount, p.w)
    p.s.entry.reserved = p.s.entry.reserved + p.amount
    note(p.budget, p.s, p.before, p.w)
    redis.call('HSET', KEY.spend, p.s.field, entry_format(p.s.entry))
    if last ~= p.budget.name then names[#names + 1] = p.budget.name .. '=' .. int(p.amount) end
    last = p.budget.name
  end
  redis.call('HSET', KEY.spend, 'r:' .. id, tenant .. '|' .. int(NOW) .. '|' .. int(NOW + extra) .. '|'
    .. table.concat(names, ','))
  spend_keep(keep)
  return finish({SCHEMA, 'reserved'})
end

-- step: a settlement
-- settle: the reservation's record (else the client's figure, at no known time)
local reservation = redis.call('HGET', KEY.spend, 'r:' .. id)
local who, at, names = tenant, nil, nil  -- names: budget -> what the call reserved in it
if reservation then
  local r_tenant, r_at, _, r_names = string.match(reservation, '^([^|]*)|(%d+)|(%d+)|(.*)$')
  if r_tenant then
    who, at, names = r_tenant, tonumber(r_at), {}
    for name, reserved in string.gmatch(r_names, '([^,=]+)=(%d+)') do names[name] = tonumber(reserved) end
  end
  redis.call('HDEL', KEY.spend, 'r:' .. id)
end
for _, budget in ipairs(budgets) do
  if not names or names[budget.name] then
    local reserved = names and names[budget.name] or reserved_by_client[budget.slot]
    local delta = amounts[budget.slot] - reserved
    local w = budget.w
    kept(w)
    local key = nil
    if at then
      if w.rolling then key = math.floor(at / w.slot_ms) elseif at >= w.start then key = w.cur end
    end
    for _, s in ipairs(scopes_of(budget, w, who)) do
      local before = entry_spent(s.entry)
      if names then s.entry.reserved = math.max(0, s.entry.reserved - reserved) end
      if names then charge(s.entry, key, delta, w) elseif delta > 0 then charge(s.entry, nil, delta, w) end
      note(budget, s, before, w)
      redis.call('HSET', KEY.spend, s.field, entry_format(s.entry))
    end
  end
end
spend_keep(keep)
return finish({SCHEMA, 'settled'})
