package token

import (
	"sync"
	"time"
)

// Limits of the verified-token cache each Verifier keeps.
const (
	// CacheTTL is the longest a verified token is served from the cache
	// before it is verified again (one minute); an entry also ends at the
	// token's exp plus the leeway, whichever comes first.
	CacheTTL = time.Minute
	// CacheEntries bounds the number of cached tokens (4,096).
	CacheEntries = 4096
	// MaxCachedTokenLength is the longest token that is cached (1 KiB);
	// longer ones (valid, but unlike what sandgate mints) are verified
	// every time. With CacheEntries it bounds the cache to about 4 MiB.
	MaxCachedTokenLength = 1 << 10
)

// verifiedCache maps a whole raw token, byte for byte, to the Target its
// successful verification returned, until the entry's end. Only tokens
// that verified are stored, so an entry can only repeat an earlier
// success: a different signature, header or claim is a different key.
// Safe for concurrent use.
type verifiedCache struct {
	mu      sync.RWMutex
	entries map[string]cacheEntry
}

type cacheEntry struct {
	target Target
	until  time.Time
}

// get returns the cached Target of raw when its entry has not ended at
// now.
func (c *verifiedCache) get(raw string, now time.Time) (Target, bool) {
	c.mu.RLock()
	e, ok := c.entries[raw]
	c.mu.RUnlock()
	if !ok || !now.Before(e.until) {
		return Target{}, false
	}
	return e.target, true
}

// put stores raw's Target until the given time. When the cache is full it
// first drops the entries that have ended, then, if still full, arbitrary
// ones (Go's map order) until a tenth of the room is free.
func (c *verifiedCache) put(raw string, t Target, until, now time.Time) {
	if len(raw) > MaxCachedTokenLength || !now.Before(until) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = make(map[string]cacheEntry)
	}
	if _, ok := c.entries[raw]; !ok && len(c.entries) >= CacheEntries {
		for k, e := range c.entries {
			if !now.Before(e.until) {
				delete(c.entries, k)
			}
		}
		for k := range c.entries {
			if len(c.entries) < CacheEntries-CacheEntries/10 {
				break
			}
			delete(c.entries, k)
		}
	}
	c.entries[raw] = cacheEntry{target: t, until: until}
}

// len returns the number of entries (tests).
func (c *verifiedCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}
