package proto

import (
	"bytes"
	"math"
	"strconv"
	"time"
)

// The heartbeat and its ack are the node protocol's most frequent frames
// (one of each per node every 10 s, spec "Connection"), and Core decodes
// every heartbeat and encodes every ack. Their shapes are fixed and small,
// so both have a path of their own beside the general codec:
//
//   - decodeHeartbeatCanonical reads a heartbeat only in the exact layout
//     Encode writes (members in declaration order, no whitespace, strings
//     of printable ASCII without escapes, integers without sign or
//     exponent where unsigned, times as time.RFC3339Nano writes them). On
//     any other byte it gives up, and Decode takes the general path, which
//     accepts or refuses the frame as it always did. What it accepts, the
//     general path accepts too, with an equal frame (FuzzHeartbeatFast).
//   - appendHeartbeatAck writes the ack's bytes by hand, equal to the
//     marshaller's (TestAppendHeartbeatAckMatchesMarshal, FuzzHeartbeatFast);
//     it runs after validate, which leaves only lowercase hexadecimal,
//     dashes and digits in its strings, so nothing needs escaping.
//
// Validation (validate, the field rules of docs/node-protocol.md) runs on
// both paths unchanged.

// cursor reads the canonical layout of a frame from data; ok turns false
// at the first byte that does not fit, and stays false.
type cursor struct {
	data []byte
	i    int
	ok   bool
}

// lit consumes s.
func (c *cursor) lit(s string) {
	if !c.ok || len(c.data)-c.i < len(s) || string(c.data[c.i:c.i+len(s)]) != s {
		c.ok = false
		return
	}
	c.i += len(s)
}

// peek reports whether the next bytes are s, without consuming them.
func (c *cursor) peek(s string) bool {
	return c.ok && len(c.data)-c.i >= len(s) && string(c.data[c.i:c.i+len(s)]) == s
}

// str consumes a string of printable ASCII without escapes, quotes
// included, and returns its bytes (a slice of data).
func (c *cursor) str() []byte {
	c.lit(`"`)
	if !c.ok {
		return nil
	}
	start := c.i
	for c.i < len(c.data) && plainByte[c.data[c.i]] {
		c.i++
	}
	if c.i == len(c.data) || c.data[c.i] != '"' {
		c.ok = false
		return nil
	}
	s := c.data[start:c.i]
	c.i++
	return s
}

// plainByte marks the bytes a string may hold on the canonical path:
// printable ASCII but the quote and the backslash.
var plainByte = func() (t [256]bool) {
	for b := 0x20; b <= 0x7e; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// digits consumes a JSON integer without sign, 0|[1-9][0-9]*, and returns
// its bytes.
func (c *cursor) digits() []byte {
	if !c.ok || c.i >= len(c.data) {
		c.ok = false
		return nil
	}
	start := c.i
	if c.data[c.i] == '0' {
		c.i++
		return c.data[start:c.i]
	}
	for c.i < len(c.data) && c.data[c.i] >= '0' && c.data[c.i] <= '9' {
		c.i++
	}
	if c.i == start {
		c.ok = false
		return nil
	}
	return c.data[start:c.i]
}

// int64 consumes an integer, -?(0|[1-9][0-9]*), that fits an int64.
func (c *cursor) int64() int64 {
	neg := c.peek("-")
	if neg {
		c.i++
	}
	u := c.uint64()
	switch {
	case !c.ok:
		return 0
	case neg && u <= 1<<63:
		return int64(-u) // two's complement: -(1<<63) is math.MinInt64
	case !neg && u < 1<<63:
		return int64(u)
	}
	c.ok = false
	return 0
}

// uint64 consumes an unsigned integer, 0|[1-9][0-9]*, that fits a uint64.
func (c *cursor) uint64() uint64 {
	d := c.digits()
	var n uint64
	for _, b := range d {
		if n > (math.MaxUint64-9)/10 && (n > math.MaxUint64/10 || uint64(b-'0') > math.MaxUint64-10*n) {
			c.ok = false
			return 0
		}
		n = 10*n + uint64(b-'0')
	}
	return n
}

// float64 consumes a JSON number, -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?,
// that parses as a finite float64.
func (c *cursor) float64() float64 {
	start := c.i
	if c.peek("-") {
		c.i++
	}
	c.digits()
	if c.peek(".") {
		c.i++
		c.run()
	}
	if c.peek("e") || c.peek("E") {
		c.i++
		if c.peek("+") || c.peek("-") {
			c.i++
		}
		c.run()
	}
	if !c.ok {
		return 0
	}
	f, err := strconv.ParseFloat(string(c.data[start:c.i]), 64)
	if err != nil {
		c.ok = false
	}
	return f
}

// run consumes one or more decimal digits.
func (c *cursor) run() {
	start := c.i
	for c.ok && c.i < len(c.data) && c.data[c.i] >= '0' && c.data[c.i] <= '9' {
		c.i++
	}
	if c.i == start {
		c.ok = false
	}
}

// bool consumes true or false.
func (c *cursor) bool() bool {
	switch {
	case c.peek("true"):
		c.i += len("true")
		return true
	case c.peek("false"):
		c.i += len("false")
		return false
	}
	c.ok = false
	return false
}

// time consumes a string that time.Time.UnmarshalText accepts and that
// is exactly what time.RFC3339Nano formats the result as (which the v2
// decoder's stricter RFC 3339 checks accept too).
func (c *cursor) time() time.Time {
	s := c.str()
	if !c.ok {
		return time.Time{}
	}
	var t time.Time
	var buf [len(time.RFC3339Nano) + 8]byte
	if t.UnmarshalText(s) != nil || string(t.AppendFormat(buf[:0], time.RFC3339Nano)) != string(s) {
		c.ok = false
	}
	return t
}

// code returns d as a string, without an allocation when it is one of
// the diagnostic codes this package knows.
func code(d []byte) string {
	if k, ok := knownCodes[string(d)]; ok {
		return k
	}
	return string(d)
}

// knownCodes maps each diagnostic code to itself (the strings code
// returns).
var knownCodes = func() map[string]string {
	m := make(map[string]string, len(diagnostics))
	for k := range diagnostics {
		m[k] = k
	}
	return m
}()

// state returns s as a GenerationState, without an allocation when it is
// one of the three states.
func state(s []byte) GenerationState {
	for _, st := range [...]GenerationState{GenerationReady, GenerationPreparing, GenerationFailed} {
		if string(s) == string(st) {
			return st
		}
	}
	return GenerationState(s)
}

// heartbeatHeader is the start of every heartbeat Encode writes.
var heartbeatHeader = `{"version":` + strconv.Itoa(ProtocolVersion) + `,"type":"` + TypeHeartbeat + `","connection_id":`

// decodeHeartbeatCanonical decodes data as a heartbeat in the exact
// layout Encode writes and reports whether it could; on false the caller
// takes the general path. It checks no field rule (validate does).
func decodeHeartbeatCanonical(data []byte) (*Heartbeat, bool) {
	c := cursor{data: data, ok: true}
	h := &Heartbeat{Version: ProtocolVersion, Type: TypeHeartbeat}
	c.lit(heartbeatHeader)
	h.ConnectionID = string(c.str())
	c.lit(`,"owner_epoch":`)
	h.OwnerEpoch = c.int64()
	c.lit(`,"health":{"provider_ready":`)
	hl := &h.Health
	hl.ProviderReady = c.bool()
	if c.peek(`,"diagnostic":`) {
		c.i += len(`,"diagnostic":`)
		d := c.str()
		if len(d) == 0 {
			return nil, false // present but empty: the general path refuses it
		}
		hl.Diagnostic = code(d)
	}
	c.lit(`,"observed_at":`)
	hl.ObservedAt = c.time()
	c.lit(`,"active_operations":`)
	hl.ActiveOperations = int(c.int64())
	c.lit(`,"host":{"cpu_count":`)
	hl.Host.CPUCount = int(c.int64())
	c.lit(`,"cpu_percent":`)
	hl.Host.CPUPercent = c.float64()
	c.lit(`,"memory_total_bytes":`)
	hl.Host.MemoryTotalBytes = c.uint64()
	c.lit(`,"memory_used_bytes":`)
	hl.Host.MemoryUsedBytes = c.uint64()
	c.lit(`,"disk_total_bytes":`)
	hl.Host.DiskTotalBytes = c.uint64()
	c.lit(`,"disk_used_bytes":`)
	hl.Host.DiskUsedBytes = c.uint64()
	c.lit(`}}`)
	if c.peek(`,"generations":[`) {
		c.i += len(`,"generations":[`)
		// One allocation for the observations (at most 8 valid ones;
		// more are counted and refused by validate as before).
		h.Generations = make([]GenerationObservation, 0, bytes.Count(data[c.i:], []byte(`{"generation":`)))
		for c.ok {
			var o GenerationObservation
			c.lit(`{"generation":`)
			o.Generation = c.int64()
			c.lit(`,"specification_digest":`)
			o.SpecificationDigest = string(c.str())
			c.lit(`,"state":`)
			o.State = state(c.str())
			if c.peek(`,"diagnostic":`) {
				c.i += len(`,"diagnostic":`)
				d := c.str()
				if len(d) == 0 {
					return nil, false
				}
				o.Diagnostic = code(d)
			}
			c.lit(`}`)
			h.Generations = append(h.Generations, o)
			if !c.peek(`,`) {
				break
			}
			c.i++
		}
		c.lit(`]`)
	}
	c.lit(`}`)
	if !c.ok || c.i != len(data) {
		return nil, false
	}
	return h, true
}

// appendHeartbeatAck appends the encoding of a, which validate accepted,
// to dst: the bytes the marshaller writes with encodeOptions.
func appendHeartbeatAck(dst []byte, a *HeartbeatAck) []byte {
	dst = append(dst, `{"version":`...)
	dst = strconv.AppendInt(dst, int64(a.Version), 10)
	dst = append(dst, `,"type":"`...)
	dst = append(dst, a.Type...)
	dst = append(dst, `","connection_id":"`...)
	dst = append(dst, a.ConnectionID...)
	dst = append(dst, `","owner_epoch":`...)
	dst = strconv.AppendInt(dst, a.OwnerEpoch, 10)
	if d := a.Deployment; d != nil {
		dst = append(dst, `,"deployment":{"generation":`...)
		dst = strconv.AppendInt(dst, d.Generation, 10)
		dst = append(dst, `,"specification_digest":"`...)
		dst = append(dst, d.SpecificationDigest...)
		dst = append(dst, `","serving_generation":`...)
		if d.ServingGeneration == nil {
			dst = append(dst, "null"...)
		} else {
			dst = strconv.AppendInt(dst, *d.ServingGeneration, 10)
		}
		dst = append(dst, '}')
	}
	return append(dst, '}')
}
