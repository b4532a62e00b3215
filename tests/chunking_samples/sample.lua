local json = require("json")

-- A queue of jobs, oldest first.
local Queue = {}
Queue.__index = Queue

function Queue.new()
  return setmetatable({ items = {} }, Queue)
end

function Queue:push(job)
  table.insert(self.items, job)
end

function Queue:pop()
  return table.remove(self.items, 1)
end

local function encode(job)
  return json.encode(job)
end

local drain = function(queue)
  while queue:pop() do end
end

return Queue
