-- specula_route.lua: HAProxy Lua action that derives a prefix-affinity
-- routing key for a Specula request.
--
--   http-request lua.specula_route_key N     (N: bytes of prompt in the key)
--
-- sets the transaction variable txn.specula_key to a hex digest of
--
--   tenant  = sha256(Authorization header) (never the key itself), plus the
--             request's "cache_salt" when given: exactly what the replica
--             salts its prefix cache with, so two tenants never share a key
--             for the same prompt (and could not share cached blocks anyway);
--   prefix  = the first N bytes of "prompt" (text; token ids as "id,id,...";
--             a list of prompts: the first), or of "messages" as a chat
--             template puts them first: each message's role then its text
--             content, in order (system message, then the first turns).
--
-- The backend hashes this variable with `balance hash var(txn.specula_key)`
-- and `hash-type consistent`. A request without a usable body (GET, not
-- JSON, no prompt) gets no variable, and HAProxy then balances it round
-- robin.
--
-- The body may be cut short: the frontend waits for at most `tune.bufsize`
-- bytes of it (see haproxy.cfg.in), so the parser below accepts a JSON text
-- that ends anywhere and uses what it has read. Strings are decoded (escapes
-- and \uXXXX), so the same prompt encoded two ways routes the same.

local MAX_DEPTH = 64

-- ---- a small JSON reader that tolerates truncation -------------------------

local function utf8_char(cp)
    if cp < 0x80 then return string.char(cp) end
    if cp < 0x800 then
        return string.char(0xC0 | (cp >> 6), 0x80 | (cp & 0x3F))
    end
    if cp < 0x10000 then
        return string.char(0xE0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F))
    end
    return string.char(0xF0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3F),
                       0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F))
end

local ESC = { ['"'] = '"', ['\\'] = '\\', ['/'] = '/', b = '\b', f = '\f',
              n = '\n', r = '\r', t = '\t' }

-- string starting after its opening quote at i; returns value, next index,
-- complete (false: the text ended inside it). Stops copying after `cap` bytes
-- (the rest is skipped), so a long prompt costs no copy beyond the key's N.
local function read_string(s, i, cap)
    local parts, have = {}, 0
    local len = #s
    while i <= len do
        local j = s:find('["\\]', i)
        if not j then
            if have < cap then parts[#parts + 1] = s:sub(i, len) end
            return table.concat(parts), len + 1, false
        end
        if j > i and have < cap then
            parts[#parts + 1] = s:sub(i, j - 1)
            have = have + (j - i)
        end
        local c = s:sub(j, j)
        if c == '"' then return table.concat(parts), j + 1, true end
        -- an escape
        local e = s:sub(j + 1, j + 1)
        if e == '' then return table.concat(parts), len + 1, false end
        if e == 'u' then
            local hex = s:sub(j + 2, j + 5)
            if #hex < 4 then return table.concat(parts), len + 1, false end
            local cp = tonumber(hex, 16) or 0xFFFD
            local nexti = j + 6
            if cp >= 0xD800 and cp <= 0xDBFF and s:sub(nexti, nexti + 1) == '\\u' then
                local lo = tonumber(s:sub(nexti + 2, nexti + 5), 16)
                if lo and lo >= 0xDC00 and lo <= 0xDFFF then
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                    nexti = nexti + 6
                end
            end
            if have < cap then
                local u = utf8_char(cp)
                parts[#parts + 1] = u
                have = have + #u
            end
            i = nexti
        else
            if have < cap then
                parts[#parts + 1] = ESC[e] or e
                have = have + 1
            end
            i = j + 2
        end
    end
    return table.concat(parts), len + 1, false
end

local function skip_ws(s, i)
    return s:find('[^ \t\r\n]', i) or #s + 1
end

-- value at i; returns value, next index, complete. Objects and arrays are
-- Lua tables (arrays with n = count); a truncated one holds what was read.
local read_value
read_value = function(s, i, cap, depth)
    if depth > MAX_DEPTH then return nil, #s + 1, false end
    i = skip_ws(s, i)
    local c = s:sub(i, i)
    if c == '' then return nil, i, false end
    if c == '"' then return read_string(s, i + 1, cap) end
    if c == '{' then
        local obj = {}
        i = skip_ws(s, i + 1)
        if s:sub(i, i) == '}' then return obj, i + 1, true end
        while true do
            i = skip_ws(s, i)
            if s:sub(i, i) ~= '"' then return obj, #s + 1, false end
            local k, ni, ok = read_string(s, i + 1, 256)
            if not ok then return obj, ni, false end
            i = skip_ws(s, ni)
            if s:sub(i, i) ~= ':' then return obj, #s + 1, false end
            local v
            v, i, ok = read_value(s, i + 1, cap, depth + 1)
            if v ~= nil and obj[k] == nil then obj[k] = v end
            if not ok then return obj, i, false end
            i = skip_ws(s, i)
            local d = s:sub(i, i)
            if d == '}' then return obj, i + 1, true end
            if d ~= ',' then return obj, #s + 1, false end
            i = i + 1
        end
    end
    if c == '[' then
        local arr = { n = 0 }
        i = skip_ws(s, i + 1)
        if s:sub(i, i) == ']' then return arr, i + 1, true end
        while true do
            local v, ok
            v, i, ok = read_value(s, i, cap, depth + 1)
            if v ~= nil then
                arr.n = arr.n + 1
                arr[arr.n] = v
            end
            if not ok then return arr, i, false end
            i = skip_ws(s, i)
            local d = s:sub(i, i)
            if d == ']' then return arr, i + 1, true end
            if d ~= ',' then return arr, #s + 1, false end
            i = i + 1
        end
    end
    -- number, true, false, null
    local j = s:find('[,%]} \t\r\n]', i)
    if not j then
        -- a scalar cut by the end of the text: incomplete (a number could go on)
        return nil, #s + 1, false
    end
    local tok = s:sub(i, j - 1)
    if tok == 'true' then return true, j, true end
    if tok == 'false' then return false, j, true end
    if tok == 'null' then return nil, j, true end
    return tonumber(tok), j, true
end

-- ---- the routing key --------------------------------------------------------

-- appends text to acc (a table with .n bytes so far) up to cap bytes
local function take(acc, text, cap)
    if acc.n >= cap or type(text) ~= 'string' then return end
    local t = text:sub(1, cap - acc.n)
    acc[#acc + 1] = t
    acc.n = acc.n + #t
end

local function content_text(acc, content, cap)
    if type(content) == 'string' then
        take(acc, content, cap)
    elseif type(content) == 'table' then
        for k = 1, content.n or 0 do
            local part = content[k]
            if type(part) == 'table' and type(part.text) == 'string' then
                take(acc, part.text, cap)
            end
        end
    end
end

-- the first cap bytes of what the model will read first, or nil
local function prompt_prefix(body, cap)
    local j = read_value(body, 1, cap, 0)
    if type(j) ~= 'table' then return nil, nil end
    local acc = { n = 0 }
    local p = j.prompt
    if type(p) == 'string' then
        take(acc, 'P\n', cap + 2)
        take(acc, p, cap + 2)
    elseif type(p) == 'table' and (p.n or 0) > 0 then
        if type(p[1]) == 'string' then          -- a list of prompts: the first
            take(acc, 'P\n', cap + 2)
            take(acc, p[1], cap + 2)
        else                                     -- token ids
            take(acc, 'T\n', cap + 2)
            for k = 1, p.n do
                if type(p[k]) ~= 'number' then break end
                take(acc, string.format('%d,', math.tointeger(p[k]) or 0), cap + 2)
                if acc.n >= cap + 2 then break end
            end
        end
    elseif type(j.messages) == 'table' then
        take(acc, 'M\n', cap + 2)
        for k = 1, j.messages.n or 0 do
            local m = j.messages[k]
            if type(m) == 'table' then
                take(acc, tostring(m.role or '') .. '\n', cap + 2)
                content_text(acc, m.content, cap + 2)
                take(acc, '\n', cap + 2)
            end
            if acc.n >= cap + 2 then break end
        end
    else
        return nil, nil
    end
    local salt = type(j.cache_salt) == 'string' and j.cache_salt or ''
    return table.concat(acc), salt
end

local function hex(s)
    return (s:gsub('.', function(c) return string.format('%02x', c:byte()) end))
end

core.register_action('specula_route_key', { 'http-req' }, function(txn, nbytes)
    local cap = tonumber(nbytes) or 512
    if cap < 1 then cap = 1 end
    local body = txn.f:req_body()
    if not body or #body == 0 then return end
    local prefix, salt = prompt_prefix(body, cap)
    if not prefix then return end
    local auth = txn.http:req_get_headers()['authorization']
    auth = auth and auth[0] or ''
    -- the tenant: a digest of the key (the key itself never leaves this
    -- function), then the salt; the whole key is digested again so that
    -- neither the prompt nor the salt ends up in a variable or a log
    local tenant = txn.c:sha2(auth, 256) .. '\0' .. salt
    local key = txn.c:sha2(tenant .. '\0' .. prefix, 256)
    txn:set_var('txn.specula_key', hex(key:sub(1, 16)))
end, 1)
