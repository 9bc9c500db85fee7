"""The Lua scripts of the Redis state store (``state/redis.py``): one script per
read-modify-write, so a call is atomic across every replica sharing the Redis.

Shared ARGV head: ``ARGV[1]`` the caller's clock in seconds, or ``""`` for Redis's own
``TIME``. Reserve and adjust then take four ARGV per charge, in KEYS order: kind (``b``
bucket, ``c`` counter), cost, capacity or limit, period or TTL in seconds.

Layout: a bucket is a hash ``{l: level, t: when}`` (absent = full), a counter a hash
``{v: value, e: expires at}`` (absent or past ``e`` = 0), a lease set a sorted set of lease
ids scored by their expiry. Every key also carries a Redis TTL (when it would be full,
reset or empty, plus a second), so Redis drops idle state by itself. Numbers go back to
the client as strings (Lua numbers are doubles; Redis truncates returned numbers).
"""

from __future__ import annotations

_HEAD = """
local function clock()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1e6
end
local function num(x) return string.format('%.17g', x) end
local function keep(key, seconds)
  redis.call('PEXPIRE', key, math.max(1, math.ceil(seconds * 1000)) + 1000)
end
local now = clock()
local function load(i)
  local a = 2 + (i - 1) * 4
  local c = {kind = ARGV[a], cost = tonumber(ARGV[a + 1]), cap = tonumber(ARGV[a + 2]),
             span = tonumber(ARGV[a + 3])}
  if c.kind == 'b' then
    local h = redis.call('HMGET', KEYS[i], 'l', 't')
    c.rate = c.cap / c.span
    c.v = c.cap
    if h[1] then c.v = math.min(c.cap, tonumber(h[1]) + (now - tonumber(h[2])) * c.rate) end
  else
    local h = redis.call('HMGET', KEYS[i], 'v', 'e')
    c.v, c.e = 0, now + c.span
    if h[1] and tonumber(h[2]) > now then c.v, c.e = tonumber(h[1]), tonumber(h[2]) end
  end
  return c
end
local function save(i, c)
  if c.kind == 'b' then
    redis.call('HSET', KEYS[i], 'l', num(c.v), 't', num(now))
    keep(KEYS[i], math.max(c.cap - c.v, 0) / c.rate)
  else
    redis.call('HSET', KEYS[i], 'v', num(c.v), 'e', num(c.e))
    keep(KEYS[i], c.e - now)
  end
end
"""

RESERVE = _HEAD + """
local EPS = 1e-9
local cs, out, refused, retry, never = {}, {}, 0, 0, false
for i = 1, #KEYS do
  local c = load(i)
  cs[i] = c
  local wait = 0
  if c.kind == 'c' then
    if c.v + c.cost > c.cap then
      if c.cost > c.cap then never = true else wait = c.e - now end
      if wait <= 0 and not never then wait = 1e-9 end
    end
  elseif c.v + EPS < c.cost then
    if c.cost > c.cap then never = true else wait = (c.cost - c.v) / c.rate end
  end
  if (wait > 0 or never) and refused == 0 then refused = i end
  if wait > retry then retry = wait end
end
for i, c in ipairs(cs) do
  if refused == 0 then
    if c.kind == 'c' then c.v = c.v + c.cost else c.v = c.v - c.cost end
    save(i, c)
  end
  if c.kind == 'c' then
    out[#out + 1] = num(c.cap - c.v); out[#out + 1] = num(math.max(c.e - now, 0))
  else
    out[#out + 1] = num(c.v); out[#out + 1] = num(math.max(c.cap - c.v, 0) / c.rate)
  end
end
local r = ''
if not never then r = num(retry) end
return {refused, r, unpack(out)}
"""
"""KEYS: the limits' keys. Returns ``{denied index (0: allowed, else 1-based), retry
seconds or "" for never, then remaining and reset seconds per charge}``."""

ADJUST = _HEAD + """
for i = 1, #KEYS do
  local c = load(i)
  if c.kind == 'c' then c.v = math.max(0, c.v + c.cost) else c.v = math.min(c.cap, c.v - c.cost) end
  save(i, c)
end
return 1
"""
"""KEYS: the limits' keys; moves each by its cost without a check."""

LEASE = """
local now
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else
  local t = redis.call('TIME'); now = tonumber(t[1]) + tonumber(t[2]) / 1e6 end
local ttl = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.17g', now))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], string.format('%.17g', now + ttl), ARGV[4])
local ms = math.ceil(ttl * 1000) + 1000
if redis.call('PTTL', KEYS[1]) < ms then redis.call('PEXPIRE', KEYS[1], ms) end
return 1
"""
"""KEYS[1]: the lease set; ARGV: clock, limit, TTL seconds, the new lease id. Returns 1
when the lease was taken, 0 when ``limit`` unexpired leases are held."""
