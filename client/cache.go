package client

import (
	"sync"

	"github.com/lockcell/lockcell/api"
)

// cache holds file contents and stat for handles opened with caching
// (api.OpenRequest.Cache). It is consistent because the master invalidates
// (by an event the KeepAlive loop acknowledges) before a write to a cached
// node completes, and only reads the master answers as Cacheable are kept;
// the loop drops entries on every invalidating event, and the whole cache
// on fail-over, overflow and jeopardy (when it is also turned off until the
// session is safe again).
//
// A read that races with an invalidation must not put stale data back: gen
// counts invalidations, and an entry is stored only if no invalidation
// happened since the read began.
type cache struct {
	on bool // Config.Cache
	mu struct {
		sync.Mutex
		enabled bool
		gen     uint64
		files   map[string]cachedFile
	}
}

type cachedFile struct {
	contents []byte
	stat     api.NodeStat
}

func newCache(on bool) *cache {
	c := &cache{on: on}
	c.mu.enabled = on
	c.mu.files = map[string]cachedFile{}
	return c
}

func (c *cache) get(path string) (cachedFile, bool) {
	if !c.on {
		return cachedFile{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.mu.enabled {
		return cachedFile{}, false
	}
	f, ok := c.mu.files[path]
	return f, ok
}

// begin returns the invalidation count before a read.
func (c *cache) begin() uint64 {
	if !c.on {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.gen
}

// put stores a read's result unless an invalidation happened since begin.
func (c *cache) put(path string, gen uint64, f cachedFile) {
	if !c.on {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.enabled && c.mu.gen == gen {
		c.mu.files[path] = f
	}
}

func (c *cache) invalidate(path string) {
	if !c.on {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.gen++
	delete(c.mu.files, path)
}

func (c *cache) flush() {
	if !c.on {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.gen++
	clear(c.mu.files)
}

func (c *cache) disable() {
	if !c.on {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.enabled = false
	c.mu.gen++
	clear(c.mu.files)
}

func (c *cache) enable() {
	if !c.on {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.enabled = true
}
