package proto

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
)

// heartbeatVariants are heartbeats of every shape the canonical path
// reads: with and without a diagnostic and observations, times in UTC and
// at an offset, with and without fractional seconds, extreme numbers.
func heartbeatVariants() []*Heartbeat {
	var out []*Heartbeat
	base := func() *Heartbeat { return &Heartbeat{ConnectionID: exConnection, OwnerEpoch: 7, Health: exHealth()} }
	out = append(out, base(), exHeartbeat())
	h := base()
	h.Health.ObservedAt = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.FixedZone("", -(7*3600+30*60)))
	h.Health.Host = HostMeasurements{CPUCount: math.MaxInt, CPUPercent: 100, MemoryTotalBytes: math.MaxUint64,
		MemoryUsedBytes: math.MaxUint64, DiskTotalBytes: 0, DiskUsedBytes: 0}
	h.OwnerEpoch = math.MaxInt64
	out = append(out, h)
	h = base()
	h.Health.ObservedAt = time.Date(1999, 12, 31, 23, 59, 59, 100000000, time.FixedZone("", 14*3600))
	h.Health.Host.CPUPercent = 1e-7
	h.Health.ActiveOperations = 0
	out = append(out, h)
	h = base()
	h.Health.Host.CPUPercent = 0.30000000000000004
	h.Health.ProviderReady, h.Health.Diagnostic = false, "some_unknown_code"
	h.Generations = []GenerationObservation{{Generation: 1, SpecificationDigest: exDigest, State: GenerationFailed, Diagnostic: DiagImageMissing}}
	out = append(out, h)
	return out
}

// TestHeartbeatCanonicalPath checks that every heartbeat Encode writes is
// read by the canonical path, to the frame the general path returns.
func TestHeartbeatCanonicalPath(t *testing.T) {
	for i, h := range heartbeatVariants() {
		data := mustEncode(t, h)
		fast, ok := decodeHeartbeatCanonical(data)
		if !ok {
			t.Fatalf("variant %d: the canonical path gave up on what Encode wrote:\n%s", i, data)
		}
		general, err := decode(data, false)
		if err != nil {
			t.Fatalf("variant %d: %v", i, err)
		}
		if !frameEqual(Frame(fast), general) {
			t.Fatalf("variant %d: the paths differ:\n%#v\n%#v", i, fast, general)
		}
	}
}

// TestHeartbeatCanonicalPathGivesUp checks that the canonical path leaves
// every heartbeat not in Encode's exact layout to the general path, which
// accepts or refuses it as before.
func TestHeartbeatCanonicalPathGivesUp(t *testing.T) {
	data := string(mustEncode(t, exHeartbeat()))
	for _, c := range []struct{ name, data string }{
		{"whitespace", strings.Replace(data, `"owner_epoch":7`, `"owner_epoch": 7`, 1)},
		{"escaped string", strings.Replace(data, `"docker_unreachable"`, `"docker\u005funreachable"`, 1)},
		{"empty diagnostic", strings.Replace(data, `"docker_unreachable"`, `""`, 1)},
		{"null", strings.Replace(data, `"diagnostic":"docker_unreachable"`, `"diagnostic":null`, 1)},
		{"members reordered", strings.Replace(data, `"cpu_count":8,"cpu_percent":12.5`, `"cpu_percent":12.5,"cpu_count":8`, 1)},
		{"duplicate member", strings.Replace(data, `"cpu_count":8`, `"cpu_count":8,"cpu_count":8`, 1)},
		{"unknown member", strings.Replace(data, `"cpu_count":8`, `"cpu_count":8,"gpu_count":1`, 1)},
		{"exponent integer", strings.Replace(data, `"cpu_count":8`, `"cpu_count":8e0`, 1)},
		{"leading zero", strings.Replace(data, `"cpu_count":8`, `"cpu_count":08`, 1)},
		{"negative unsigned", strings.Replace(data, `"disk_used_bytes":128849018880`, `"disk_used_bytes":-1`, 1)},
		{"unsigned overflow", strings.Replace(data, `"disk_used_bytes":128849018880`, `"disk_used_bytes":18446744073709551616`, 1)},
		{"time not canonical", strings.Replace(data, `2026-11-07T12:00:00Z`, `2026-11-07T12:00:00.000Z`, 1)},
		{"time lower case", strings.Replace(data, `2026-11-07T12:00:00Z`, `2026-11-07t12:00:00z`, 1)},
		{"empty generations", strings.Replace(data, data[strings.Index(data, `,"generations":`):], `,"generations":[]}`, 1)},
		{"trailing data", data + " "},
		{"truncated", data[:len(data)-1]},
	} {
		if _, ok := decodeHeartbeatCanonical([]byte(c.data)); ok {
			t.Errorf("%s: the canonical path read %s", c.name, c.data)
		}
		fastF, fastErr := decode([]byte(c.data), true)
		genF, genErr := decode([]byte(c.data), false)
		if !sameOutcome(fastF, fastErr, genF, genErr) {
			t.Errorf("%s: Decode %v, %v; general path %v, %v", c.name, fastF, fastErr, genF, genErr)
		}
	}
}

// TestHeartbeatCanonicalPathValidates checks that a canonical heartbeat
// breaking a field rule is refused with the general path's error.
func TestHeartbeatCanonicalPathValidates(t *testing.T) {
	h := &Heartbeat{ConnectionID: exConnection, OwnerEpoch: 7, Health: exHealth()}
	h.Health.ActiveOperations = MaxActiveOperations + 1
	data, err := json.Marshal(h, encodeOptions) // Encode refuses it
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte(`{"version":0,"type":""`), []byte(`{"version":1,"type":"heartbeat"`), 1)
	if _, ok := decodeHeartbeatCanonical(data); !ok {
		t.Fatalf("not canonical: %s", data)
	}
	f, err := Decode(data)
	_, genErr := decode(data, false)
	if f != nil || err == nil || genErr == nil || err.Error() != genErr.Error() {
		t.Fatalf("Decode: %v, %v; general path: %v", f, err, genErr)
	}
}

// TestAppendHeartbeatAckMatchesMarshal checks the ack's hand-written
// encoding against the marshaller's, with and without a deployment.
func TestAppendHeartbeatAckMatchesMarshal(t *testing.T) {
	for _, a := range []*HeartbeatAck{
		{ConnectionID: exConnection, OwnerEpoch: 1},
		{ConnectionID: exConnection, OwnerEpoch: math.MaxInt64},
		exHeartbeatAck(),
		{ConnectionID: exConnection, OwnerEpoch: 9, Deployment: &Deployment{Generation: math.MaxInt64,
			SpecificationDigest: exDigest, ServingGeneration: ptr(int64(3))}},
	} {
		got, err := AppendEncode([]byte("prefix"), a)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(a, encodeOptions)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "prefix"+string(want) {
			t.Fatalf("got  %s\nwant prefix%s", got, want)
		}
		if enc := mustEncode(t, a); !bytes.Equal(enc, want) {
			t.Fatalf("Encode %s\nwant   %s", enc, want)
		}
	}
}

// sameOutcome reports whether two decodings agree: equal frames, or the
// same error (and frame, for a request returned with its error).
func sameOutcome(f1 Frame, err1 error, f2 Frame, err2 error) bool {
	if (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
		return false
	}
	if f1 == nil || f2 == nil {
		return f1 == nil && f2 == nil
	}
	return frameEqual(f1, f2)
}

// FuzzHeartbeatFast checks the heartbeat's and the ack's own paths against
// the general codec: Decode (with the canonical heartbeat path) and the
// general path agree on every input, accepting with equal frames or
// refusing with the same error; and every ack the general path accepts
// encodes to the marshaller's bytes.
func FuzzHeartbeatFast(f *testing.F) {
	for _, h := range heartbeatVariants() {
		f.Add(mustEncode(f, h))
	}
	f.Add(mustEncode(f, exHeartbeatAck()))
	f.Add(mustEncode(f, &HeartbeatAck{ConnectionID: exConnection, OwnerEpoch: 3}))
	f.Fuzz(func(t *testing.T, data []byte) {
		fastF, fastErr := decode(data, true)
		genF, genErr := decode(data, false)
		if !sameOutcome(fastF, fastErr, genF, genErr) {
			t.Fatalf("Decode %#v, %v; general path %#v, %v\n%q", fastF, fastErr, genF, genErr, data)
		}
		if a, ok := genF.(*HeartbeatAck); ok && genErr == nil {
			want, err := json.Marshal(a, encodeOptions)
			if err != nil {
				t.Fatal(err)
			}
			if got := appendHeartbeatAck(nil, a); !bytes.Equal(got, want) {
				t.Fatalf("ack encoding %s, marshaller %s", got, want)
			}
		}
	})
}

// FuzzHeartbeatFields builds heartbeats from fuzzed field values, encodes
// those Encode accepts, and checks that Decode reads each to the general
// path's frame, by the canonical path whenever no string needs an escape
// and no time is at a zero offset outside UTC.
func FuzzHeartbeatFields(f *testing.F) {
	f.Add(int64(7), true, "", int64(1762516800), int64(0), int32(0), 2, 8, 12.5, uint64(16<<30), uint64(4<<30), uint64(500<<30), uint64(120<<30), int64(3), "ready", "")
	f.Add(int64(1), false, "docker_unreachable", int64(0), int64(999999999), int32(-34200), 32, 1, 0.1, uint64(1), uint64(0), uint64(0), uint64(0), int64(0), "", "")
	f.Fuzz(func(t *testing.T, epoch int64, ready bool, diag string, sec, nsec int64, offset int32, active, cpus int,
		cpuPct float64, memTotal, memUsed, diskTotal, diskUsed uint64, gen int64, state, genDiag string) {
		h := &Heartbeat{ConnectionID: exConnection, OwnerEpoch: epoch, Health: Health{
			ProviderReady: ready, Diagnostic: diag,
			ObservedAt:       time.Unix(sec%(1<<34), nsec%1e9).In(time.FixedZone("", int(offset%86400))),
			ActiveOperations: active,
			Host: HostMeasurements{CPUCount: cpus, CPUPercent: cpuPct, MemoryTotalBytes: memTotal,
				MemoryUsedBytes: memUsed, DiskTotalBytes: diskTotal, DiskUsedBytes: diskUsed},
		}}
		if gen != 0 {
			h.Generations = []GenerationObservation{{Generation: gen, SpecificationDigest: exDigest,
				State: GenerationState(state), Diagnostic: genDiag}}
		}
		data, err := Encode(h)
		if err != nil {
			return
		}
		fastF, fastErr := decode(data, true)
		genF, genErr := decode(data, false)
		if !sameOutcome(fastF, fastErr, genF, genErr) {
			t.Fatalf("Decode %#v, %v; general path %#v, %v\n%s", fastF, fastErr, genF, genErr, data)
		}
		// A zero offset of a zone other than UTC is written +00:00, which
		// time.RFC3339Nano writes Z: such a time takes the general path.
		zeroOffset := bytes.Contains(data, []byte(`+00:00"`))
		plain := !bytes.ContainsFunc(data, func(r rune) bool { return r < 0x20 || r > 0x7e || r == '\\' })
		if _, ok := decodeHeartbeatCanonical(data); !ok && plain && !zeroOffset {
			t.Fatalf("the canonical path gave up on what Encode wrote: %s", data)
		}
	})
}
