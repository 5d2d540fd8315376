package main

// Per-stream flow control (docs/agent-protocol.md, "Flow control"). Once the host has sent WINDOW for id 0, every
// stream opened after it starts with initialWindow bytes of credit in each direction: the agent sends at most that
// much OUT/ERR data before the host grants more, and the host sends at most that much IN data before the agent
// does. So the frame reader never waits for a stream's consumer, one stalled stream holds back only itself, and
// signal/cancel always get through. Without it (an older host) the agent behaves as before: output is sent as fast
// as the transport takes it, and the reader waits while 16 IN frames of a stream are queued.

import (
	"encoding/binary"
	"sync"
)

const (
	// initialWindow is each stream's credit per direction when flow control is on.
	initialWindow = 256 << 10
	// grantBatch: consumed bytes are granted back once this many have accumulated, so a stream costs one WINDOW
	// frame per quarter window instead of one per chunk (every frame is a guest wake-up under TCG).
	grantBatch = initialWindow / 4
	// legacyInFrames is how many IN frames of one stream an older host may have queued before the reader waits.
	legacyInFrames = 16
)

// windowPayload encodes a WINDOW frame's payload: u32 BE byte count.
func windowPayload(n int) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	return b[:]
}

// outCredit is what one stream may still send to the host (OUT and ERR together). Without flow control, or once
// released (the host dropped the stream, or the session ended), it is unlimited.
type outCredit struct {
	mu      sync.Mutex
	n       int
	free    bool
	waiting int
	// changed is closed (and replaced) whenever credit arrives: a broadcast to every goroutine waiting in take.
	changed chan struct{}
}

func newOutCredit(flow bool) *outCredit {
	c := &outCredit{free: !flow, changed: make(chan struct{})}
	if flow {
		c.n = initialWindow
	}
	return c
}

// take waits until some credit is available and claims up to max bytes of it. It returns max at once when the
// credit is unlimited or stop is closed.
func (c *outCredit) take(max int, stop <-chan struct{}) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.free {
			return max
		}
		if c.n > 0 {
			k := min(max, c.n)
			c.n -= k
			return k
		}
		ch := c.changed
		c.waiting++
		c.mu.Unlock()
		select {
		case <-ch:
		case <-stop:
			c.mu.Lock()
			c.waiting--
			return max
		}
		c.mu.Lock()
		c.waiting--
	}
}

// refund returns credit claimed by take but not used (a read that returned fewer bytes).
func (c *outCredit) refund(k int) {
	if k > 0 {
		c.grant(k)
	}
}

// grant adds credit (a WINDOW frame from the host).
func (c *outCredit) grant(n int) {
	c.mu.Lock()
	c.n += n
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// release makes the credit unlimited: nobody will grant more, and output is sent (or dropped) freely.
func (c *outCredit) release() {
	c.mu.Lock()
	c.free = true
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// blocked reports whether a sender is waiting for credit (the host has not taken the stream's output yet).
func (c *outCredit) blocked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting > 0
}

// inbox holds one stream's IN data between the frame reader and the goroutine that consumes it (a process's stdin,
// a file being written, a TCP socket). An empty chunk is EOF.
type inbox struct {
	mu     sync.Mutex
	q      [][]byte
	closed bool
	// flow: the host sends within credit; credit is what it may still send, ungranted what was consumed but not
	// yet granted back.
	flow      bool
	credit    int
	ungranted int
	overrun   bool
	// queued is signalled when data is added, taken when data is removed (legacy backpressure); both cap 1.
	queued chan struct{}
	taken  chan struct{}
	grant  func(n int)
}

// newInbox makes a stream's inbox; grant sends a WINDOW frame for the stream (used only with flow control).
func newInbox(flow bool, grant func(n int)) *inbox {
	b := &inbox{flow: flow, queued: make(chan struct{}, 1), taken: make(chan struct{}, 1), grant: grant}
	if flow {
		b.credit = initialWindow
	}
	return b
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// put queues one IN payload; called by the frame reader. With flow control it never waits: data past the
// stream's window is a host error, so the inbox drops it and closes (the consumer's get fails, see overran).
// Without flow control it waits while legacyInFrames chunks are queued, until the consumer takes one, the inbox
// is closed or the session ends (false).
func (b *inbox) put(p []byte, sessionDone <-chan struct{}) bool {
	for {
		b.mu.Lock()
		switch {
		case b.closed:
		case b.flow && len(p) > b.credit:
			b.overrun, b.closed, b.q = true, true, nil
		case b.flow || len(b.q) < legacyInFrames:
			b.credit -= len(p)
			b.q = append(b.q, p)
		default:
			b.mu.Unlock()
			select {
			case <-b.taken:
				continue
			case <-sessionDone:
				return false
			}
		}
		b.mu.Unlock()
		notify(b.queued)
		return true
	}
}

// get waits for the next chunk; false once stop is closed or the inbox is closed and empty.
func (b *inbox) get(stop <-chan struct{}) ([]byte, bool) {
	for {
		b.mu.Lock()
		if len(b.q) > 0 {
			p := b.q[0]
			b.q[0] = nil
			b.q = b.q[1:]
			b.mu.Unlock()
			notify(b.taken)
			return p, true
		}
		closed := b.closed
		b.mu.Unlock()
		if closed {
			return nil, false
		}
		select {
		case <-b.queued:
		case <-stop:
			return nil, false
		}
	}
}

// consumed reports n bytes of a chunk delivered to the consumer; with flow control they are granted back to the
// host in batches.
func (b *inbox) consumed(n int) {
	if !b.flow || n == 0 {
		return
	}
	b.mu.Lock()
	b.ungranted += n
	g := 0
	if b.ungranted >= grantBatch && !b.closed {
		g, b.ungranted = b.ungranted, 0
		b.credit += g
	}
	b.mu.Unlock()
	if g > 0 {
		b.grant(g)
	}
}

// overran reports whether the host sent past the stream's window (why get failed).
func (b *inbox) overran() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.overrun
}

// close drops what is queued and makes later puts no-ops: the consumer is gone.
func (b *inbox) close() {
	b.mu.Lock()
	b.closed = true
	b.q = nil
	b.mu.Unlock()
	notify(b.queued)
	notify(b.taken)
}
