package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/hack/gctrace"
	"github.com/sandgate/sandgate/hack/pacer"
)

// The authz goal: GET /internal/v1/authorize at -authz-rate questions/s,
// open loop. Each question has a scheduled send time (due); the latency
// is from due to the whole answer read (done), so a question the tool
// sends late counts its delay. Each question's timeline is kept: due,
// free (its worker was free to ask it), sent (the tool began writing
// it), done. With -authz-client raw (the default) the questions are
// written by -authz-conns workers, each on one kept-alive connection of
// its own, from request bytes built before the phase, and the answers
// read by hand (status line, Content-Length, body discarded): no garbage
// per question, so the tool's collector does not run during the phase
// (it is run once just before). Each worker waits for its question's due
// time with pacer.Until (its OS thread sleeping in clock_nanosleep), not
// on Go's timers, which fire up to about 1 ms late; raw-handoff has one
// goroutine wait and hand each question to an idle worker instead, raw-sleep waits with time.Sleep (the tool before package
// pacer). The send delay (due → sent) is reported split (pacer.Split)
// into the tool's lateness and the wait for a free worker: a worker
// still reading an earlier answer at the due time waits for corectl, and
// that time stays in the latency. -authz-client nethttp is the tool
// before the raw client (a goroutine per question through net/http's
// client, at most 256 in flight), kept to measure what the load side
// costs.

// authorizeMetric is corectl's histogram of the authorizer's own
// handling time (package corectl/metrics).
const authorizeMetric = "corectl_authorize_duration_seconds"

// question is one authorizer question's timeline, wall-clock Unix
// nanoseconds (the tool and corectl share the clock), and whether the
// answer was a 200. free is when the worker that asked it was free to
// (it had read its previous answer; with the nethttp client, due unless
// all 256 slots were taken at due): pacer.Split divides the send delay
// at it.
type question struct {
	due, free, sent, done int64
	ok                    bool
}

// authzRequests are the request bytes of a question about each owned
// and each other sandbox, asked with credential credOwn (so half the
// answers are allowed, half not_found).
func (w *world) authzRequests() (own, rest [][]byte) {
	build := func(ids []string) [][]byte {
		out := make([][]byte, len(ids))
		for i, id := range ids {
			out[i] = []byte("GET /internal/v1/authorize?credential=" + credOwn + "&sandbox=" + id + " HTTP/1.1\r\n" +
				"Host: corectl\r\nAuthorization: Bearer " + internalToken + "\r\nUser-Agent: corectlload\r\n\r\n")
		}
		return out
	}
	return build(w.own), build(w.rest)
}

// rawConn is one kept-alive HTTP/1.1 connection to corectl's API.
type rawConn struct {
	addr string
	c    net.Conn
	br   *bufio.Reader
}

// ask writes req and reads the answer, returning its status code. On an
// error the connection is closed and the next ask dials again.
func (c *rawConn) ask(req []byte) (int, error) {
	if c.c == nil {
		conn, err := net.Dial("tcp", c.addr)
		if err != nil {
			return 0, err
		}
		c.c = conn
		if c.br == nil {
			c.br = bufio.NewReaderSize(conn, 4096)
		} else {
			c.br.Reset(conn)
		}
	}
	code, err := c.exchange(req)
	if err != nil {
		c.c.Close()
		c.c = nil
	}
	return code, err
}

var errAnswer = errors.New("malformed answer")

func (c *rawConn) exchange(req []byte) (int, error) {
	if _, err := c.c.Write(req); err != nil {
		return 0, err
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || string(line[:5]) != "HTTP/" {
		return 0, errAnswer
	}
	code := int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	length := -1
	for {
		h, err := c.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(h) <= 2 {
			break
		}
		const cl = "content-length:"
		if len(h) > len(cl) && strings.EqualFold(string(h[:len(cl)]), cl) {
			length = 0
			for _, b := range h[len(cl):] {
				if b >= '0' && b <= '9' {
					length = length*10 + int(b-'0')
				}
			}
		}
	}
	if length < 0 {
		return 0, errors.New("answer without Content-Length")
	}
	if _, err := c.br.Discard(length); err != nil {
		return 0, err
	}
	return code, nil
}

// The raw client's ways of waiting for a question's due time
// (-authz-client raw, raw-handoff, raw-sleep).
const (
	// pacingWorker: each worker waits for its question itself, with
	// pacer.Until (on its own OS thread, in clock_nanosleep).
	pacingWorker = "worker"
	// pacingHandoff: one goroutine waits for each due time with
	// pacer.Until and hands the question to an idle worker (a goroutine
	// wake-up per question).
	pacingHandoff = "handoff"
	// pacingSleep: each worker waits with time.Sleep, Go's timers, which
	// fire up to about 1 ms late (the tool before package pacer).
	pacingSleep = "sleep"
)

// rawPacing is the pacing of each raw -authz-client.
var rawPacing = map[string]string{"raw": pacingWorker, "raw-handoff": pacingHandoff, "raw-sleep": pacingSleep}

// askAll asks qs's questions (qs[i].due set) with the raw client: conns
// workers, each on a connection of its own, take the next question, wait
// for its due time (pacing: pacingWorker, pacingHandoff or pacingSleep)
// and ask it; a question whose due time passes while every worker is
// busy waits for one (counted in its send delay, and in its wait for a
// free worker: question.free).
func askAll(addr string, qs []question, reqs [][]byte, conns int, pacing string) {
	// The due times with a monotonic reading, from one wall-clock one, so
	// that pacer.Until sleeps on CLOCK_MONOTONIC towards each.
	base := time.Now()
	dueOf := func(i int) time.Time { return base.Add(time.Duration(qs[i].due - base.UnixNano())) }
	// A P for each goroutine sleeping in pacer.Until, so that the
	// sleepers leave the others theirs (pacer.Procs).
	switch pacing {
	case pacingWorker:
		defer pacer.Procs(conns)()
	case pacingHandoff:
		defer pacer.Procs(1)()
	}
	var next atomic.Int64
	handoff := make(chan int)
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &rawConn{addr: addr}
			defer func() {
				if c.c != nil {
					c.c.Close()
				}
			}()
			for {
				free := time.Now().UnixNano()
				var i int
				if pacing == pacingHandoff {
					var ok bool
					if i, ok = <-handoff; !ok {
						return
					}
				} else if i = int(next.Add(1) - 1); i >= len(qs) {
					return
				}
				q := &qs[i]
				q.free = free
				switch pacing {
				case pacingWorker:
					pacer.Until(dueOf(i))
				case pacingSleep:
					if d := time.Until(dueOf(i)); d > 0 {
						time.Sleep(d)
					}
				}
				q.sent = time.Now().UnixNano()
				code, err := c.ask(reqs[i])
				q.done = time.Now().UnixNano()
				q.ok = err == nil && code == http.StatusOK
			}
		}()
	}
	if pacing == pacingHandoff {
		for i := range qs {
			pacer.Until(dueOf(i))
			handoff <- i
		}
		close(handoff)
	}
	wg.Wait()
}

// askAllNetHTTP asks qs's questions as the tool did before the raw
// client: a goroutine per question (at most 256 in flight), each through
// net/http's client with a request built then.
func askAllNetHTTP(api string, qs []question, ids []string) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for i := range qs {
		time.Sleep(time.Until(time.Unix(0, qs[i].due)))
		qs[i].free = qs[i].due
		select {
		case sem <- struct{}{}:
		default:
			sem <- struct{}{}
			qs[i].free = time.Now().UnixNano()
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			q := &qs[i]
			req, _ := http.NewRequest(http.MethodGet, api+"/internal/v1/authorize?credential="+credOwn+"&sandbox="+ids[i], nil)
			req.Header.Set("Authorization", "Bearer "+internalToken)
			q.sent = time.Now().UnixNano()
			resp, err := httpc.Do(req)
			if err != nil {
				q.done = time.Now().UnixNano()
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			q.done = time.Now().UnixNano()
			q.ok = resp.StatusCode == http.StatusOK
		}()
	}
	wg.Wait()
}

// histogram is the cumulative buckets of a Prometheus histogram at one
// scrape, or the difference of two.
type histogram struct {
	upper []float64 // ascending, +Inf last
	cum   []float64
}

// scrapeHistogram reads the buckets of histogram name (without labels)
// from the replica's /metrics; ok is false when there is none.
func (p *proc) scrapeHistogram(name string) (h histogram, ok bool) {
	resp, err := http.Get(p.probe + "/metrics")
	if err != nil {
		return h, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 64<<20))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	type bucket struct{ le, n float64 }
	var bs []bucket
	prefix := name + `_bucket{le="`
	for sc.Scan() {
		l := sc.Text()
		rest, found := strings.CutPrefix(l, prefix)
		if !found {
			continue
		}
		le, val, found := strings.Cut(rest, `"} `)
		if !found {
			continue
		}
		u, err1 := strconv.ParseFloat(le, 64)
		n, err2 := strconv.ParseFloat(strings.Fields(val)[0], 64)
		if err1 == nil && err2 == nil {
			bs = append(bs, bucket{u, n})
		}
	}
	if len(bs) == 0 {
		return h, false
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	for _, b := range bs {
		h.upper, h.cum = append(h.upper, b.le), append(h.cum, b.n)
	}
	return h, true
}

func (h histogram) sub(b histogram) histogram {
	out := histogram{upper: h.upper, cum: slices.Clone(h.cum)}
	if len(b.cum) == len(h.cum) {
		for i := range out.cum {
			out.cum[i] -= b.cum[i]
		}
	}
	return out
}

// quantile is the upper bound of the bucket holding quantile q (0–1),
// as a string ("≤ 0.1 ms", "> 50 ms" for the +Inf bucket).
func (h histogram) quantile(q float64) string {
	if len(h.cum) == 0 || h.cum[len(h.cum)-1] == 0 {
		return "-"
	}
	want := q * h.cum[len(h.cum)-1]
	for i, c := range h.cum {
		if c >= want {
			if math.IsInf(h.upper[i], 1) {
				return fmt.Sprintf("> %g ms", h.upper[i-1]*1000)
			}
			return fmt.Sprintf("≤ %g ms", h.upper[i]*1000)
		}
	}
	return "-"
}

// authzRound asks the authorizer at a fixed rate, open loop, and reports
// where the time went.
func (w *world) authzRound(p *proc, client string, f *authzFigures) {
	n := int(float64(w.c.authzRate) * w.c.authzDuration.Seconds())
	fmt.Printf("  authz: %d questions/s for %s (%s client), load average %s\n", w.c.authzRate, w.c.authzDuration, client, loadavg())
	qs := make([]question, n)
	ids := make([]string, n)
	reqs := make([][]byte, n)
	for i := range n {
		if i%2 == 0 {
			k := rand.IntN(len(w.own))
			ids[i], reqs[i] = w.own[k], w.reqOwn[k]
		} else {
			k := rand.IntN(len(w.rest))
			ids[i], reqs[i] = w.rest[k], w.reqRest[k]
		}
	}
	interval := time.Second / time.Duration(w.c.authzRate)
	h0, hasHist := p.scrapeHistogram(authorizeMetric)
	gc0, _ := p.metric("go_gc_duration_seconds_count")
	api0, _ := p.metric("rest_client_requests_total")
	alloc0, _ := p.metric("go_memstats_alloc_bytes_total")
	scans0, _ := p.metric("corectl_orphan_scans_total")
	// The tool's own garbage from before the phase is collected now, not
	// during it.
	runtime.GC()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cs0, ts0 := readSched(p.cmd.Process.Pid), readSched(os.Getpid())
	cpu0 := p.cpu()
	start := time.Now().Add(50 * time.Millisecond)
	for i := range qs {
		qs[i].due = start.Add(time.Duration(i) * interval).UnixNano()
	}
	if client == "nethttp" {
		askAllNetHTTP(p.api, qs, ids)
	} else {
		askAll(strings.TrimPrefix(p.api, "http://"), qs, reqs, w.c.authzConns, rawPacing[client])
	}
	phase := time.Since(start)
	cs, ts := readSched(p.cmd.Process.Pid).sub(cs0), readSched(os.Getpid()).sub(ts0)
	cpu := p.cpu() - cpu0
	runtime.ReadMemStats(&ms1)
	gc1, _ := p.metric("go_gc_duration_seconds_count")
	api1, _ := p.metric("rest_client_requests_total")
	alloc1, _ := p.metric("go_memstats_alloc_bytes_total")
	scans1, _ := p.metric("corectl_orphan_scans_total")

	total := make([]time.Duration, n)
	delay := make([]time.Duration, n)
	fromSend := make([]time.Duration, n)
	late := make([]time.Duration, n)
	workerWait := make([]time.Duration, n)
	bad, waited := 0, 0
	for i, q := range qs {
		total[i], delay[i], fromSend[i] = time.Duration(q.done-q.due), time.Duration(q.sent-q.due), time.Duration(q.done-q.sent)
		late[i], workerWait[i] = pacer.Split(q.due, q.free, q.sent)
		if !q.ok {
			bad++
		}
		if workerWait[i] > 0 {
			waited++
		}
	}
	p50, p99, p999 := quantiles(slices.Clone(total))
	d50, d99, d999 := quantiles(slices.Clone(delay))
	s50, s99, s999 := quantiles(slices.Clone(fromSend))
	l50, l99, l999 := quantiles(slices.Clone(late))
	ww50, ww99, ww999 := quantiles(slices.Clone(workerWait))
	f.p50, f.p99, f.p999 = append(f.p50, p50), append(f.p99, p99), append(f.p999, p999)
	f.delayP99, f.sentP99 = append(f.delayP99, d99), append(f.sentP99, s99)
	f.lateP50, f.lateP99, f.workerWaitP99 = append(f.lateP50, l50), append(f.lateP99, l99), append(f.workerWaitP99, ww99)
	fmt.Printf("  authz: %d questions, %d failed, p50 %s, p99 %s, p99.9 %s (from the scheduled send), load average %s\n", n, bad, ms(p50), ms(p99), ms(p999), loadavg())
	fmt.Printf("    send delay (scheduled → the tool writes): p50 %s, p99 %s, p99.9 %s; from the actual send to the answer read: p50 %s, p99 %s, p99.9 %s\n",
		ms(d50), ms(d99), ms(d999), ms(s50), ms(s99), ms(s999))
	fmt.Printf("    the send delay split: the tool's lateness (its worker free by the due time, or from when it was free, to the write) p50 %s, p99 %s, p99.9 %s; waiting for a free worker (each still reading an earlier answer at the due time: corectl's, kept in the latency from the scheduled send) p50 %s, p99 %s, p99.9 %s, %d questions (%.2f%%) waited\n",
		ms(l50), ms(l99), ms(l999), ms(ww50), ms(ww99), ms(ww999), waited, 100*float64(waited)/float64(n))
	// The slowest 1 %: their split and the collections they met.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return int(total[a] - total[b]) })
	tail := order[n-max(1, n/100):]
	td, ts2 := make([]time.Duration, len(tail)), make([]time.Duration, len(tail))
	tl, tw := make([]time.Duration, len(tail)), make([]time.Duration, len(tail))
	for k, i := range tail {
		td[k], ts2[k], tl[k], tw[k] = delay[i], fromSend[i], late[i], workerWait[i]
	}
	tdm, _, _ := quantiles(td)
	tsm, _, _ := quantiles(ts2)
	tlm, _, _ := quantiles(tl)
	twm, _, _ := quantiles(tw)
	fmt.Printf("    the slowest 1%% (%d questions, ≥ %s): send delay median %s (max %s: the tool's lateness median %s, max %s; waiting for a free worker median %s, max %s), actual send → answer median %s (max %s)\n",
		len(tail), ms(total[tail[0]]), ms(tdm), ms(td[len(td)-1]), ms(tlm), ms(tl[len(tl)-1]), ms(twm), ms(tw[len(tw)-1]), ms(tsm), ms(ts2[len(ts2)-1]))
	if p.gc != nil {
		ws := p.gc.Snapshot()
		from, to := qs[0].due, qs[0].done
		for _, q := range qs {
			from, to = min(from, q.due), max(to, q.done)
		}
		inPhase := 0
		for _, g := range ws {
			if g.Start <= to && from <= g.End {
				inPhase++
			}
		}
		if inPhase > 0 || len(ws) > 0 {
			tailGC, allGC := 0, 0
			for _, i := range tail {
				if gctrace.Overlaps(ws, qs[i].due, qs[i].done) {
					tailGC++
				}
			}
			for _, q := range qs {
				if gctrace.Overlaps(ws, q.due, q.done) {
					allGC++
				}
			}
			fmt.Printf("    corectl collections (gctrace): %d during the phase; %.0f%% of the slowest 1%% overlap one (%.1f%% of all questions do)\n",
				inPhase, 100*float64(tailGC)/float64(len(tail)), 100*float64(allGC)/float64(n))
		}
	}
	if hasHist {
		h1, _ := p.scrapeHistogram(authorizeMetric)
		d := h1.sub(h0)
		fmt.Printf("    corectl's own handling (%s, %.0f questions): p50 %s, p99 %s, p99.9 %s\n", authorizeMetric, d.cum[len(d.cum)-1],
			d.quantile(0.5), d.quantile(0.99), d.quantile(0.999))
	} else {
		fmt.Printf("    corectl's own handling: no %s (a corectl built before it)\n", authorizeMetric)
	}
	fmt.Printf("    during the phase (%s): corectl CPU %s (%.0f µs per question), %.0f B allocated per question, %.0f collections, %.0f apiserver requests, %.0f orphan scans ended; its threads %s\n",
		phase.Round(time.Millisecond), cpu.Round(time.Millisecond), float64(cpu.Microseconds())/float64(n), (alloc1-alloc0)/float64(n), gc1-gc0, api1-api0, scans1-scans0, cs)
	// Where in the phase the slow questions were: those over 1 ms, by
	// second of their scheduled send.
	slow := map[int]int{}
	for _, q := range qs {
		if q.done-q.due > int64(time.Millisecond) {
			slow[int((q.due-qs[0].due)/int64(time.Second))]++
		}
	}
	var secs []string
	for _, sec := range slices.Sorted(maps.Keys(slow)) {
		secs = append(secs, fmt.Sprintf("%d:%d", sec, slow[sec]))
	}
	fmt.Printf("    questions over 1 ms by second of the phase (second:count, %d a second asked): %s\n", w.c.authzRate, strings.Join(secs, " "))
	fmt.Printf("    this tool: %d collections, %.1f MB allocated (%.0f B per question), heap %.1f MB; its threads %s\n",
		ms1.NumGC-ms0.NumGC, float64(ms1.TotalAlloc-ms0.TotalAlloc)/1e6, float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(n), float64(ms1.HeapAlloc)/1e6, ts)
	f.wait = append(f.wait, time.Duration(cs.wait))
}
