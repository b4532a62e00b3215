package cache

import (
	"sync"
	"time"
)

// Entry is one cached value with its expiry.
type Entry struct {
	Value   []byte
	Expires time.Time
}

// Cache is a map guarded by a mutex.
type Cache struct {
	mu      sync.Mutex
	entries map[string]Entry
}

// Get returns the value if present and fresh.
func (c *Cache) Get(key string, now time.Time) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || now.After(e.Expires) {
		return nil, false
	}
	return e.Value, true
}

func New() *Cache {
	return &Cache{entries: map[string]Entry{}}
}
