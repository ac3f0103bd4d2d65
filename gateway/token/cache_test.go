package token

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// clock is a settable clock for a Verifier.
type clock struct{ now time.Time }

func (c *clock) set(v *Verifier) { v.now = func() time.Time { return c.now } }

// TestCacheHit: a token verified once is answered from the cache: the
// same Target, no allocation, one entry; its entry ends at the earlier of
// exp+leeway and CacheTTL after the verification.
func TestCacheHit(t *testing.T) {
	sk, k := keyPair(t, "k1", "HS256")
	v := newVerifier(t, 5*time.Second, t0, k)
	raw := mint(t, sk, target, time.Hour, t0)
	if got, err := v.Verify(raw); err != nil || got != target {
		t.Fatalf("first Verify = %+v, %v", got, err)
	}
	if n := v.cache.len(); n != 1 {
		t.Fatalf("%d cache entries after one verification", n)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if got, err := v.Verify(raw); err != nil || got != target {
			t.Fatalf("cached Verify = %+v, %v", got, err)
		}
	})
	if allocs != 0 {
		t.Errorf("a cache hit allocates %v times", allocs)
	}
	if e := v.cache.entries[raw]; !e.until.Equal(t0.Add(CacheTTL)) {
		t.Errorf("entry of a 1 h token ends at %v, want verification + %v", e.until, CacheTTL)
	}
	short := mint(t, sk, target, 20*time.Second, t0)
	if _, err := v.Verify(short); err != nil {
		t.Fatal(err)
	}
	if e := v.cache.entries[short]; !e.until.Equal(t0.Add(25 * time.Second)) {
		t.Errorf("entry of a 20 s token ends at %v, want exp + leeway", e.until)
	}
}

// TestCacheNeverOutlivesExp: a cached token stops verifying exactly when
// an uncached one would: at exp plus the leeway.
func TestCacheNeverOutlivesExp(t *testing.T) {
	sk, k := keyPair(t, "k1", "HS256")
	v := newVerifier(t, 5*time.Second, t0, k)
	c := &clock{now: t0}
	c.set(v)
	raw := mint(t, sk, target, 30*time.Second, t0)
	for _, at := range []time.Duration{0, 10 * time.Second, 34 * time.Second} {
		c.now = t0.Add(at)
		if _, err := v.Verify(raw); err != nil {
			t.Fatalf("at +%v: %v", at, err)
		}
	}
	c.now = t0.Add(35*time.Second + time.Millisecond)
	_, err := v.Verify(raw)
	assertOnly(t, err, ErrExpired, raw)
}

// TestCacheRefreshAfterTTL: after CacheTTL the token is verified again
// (here with a verifier whose key set no longer verifies it, so only a
// real verification can tell).
func TestCacheRefreshAfterTTL(t *testing.T) {
	sk, k := keyPair(t, "k1", "HS256")
	v := newVerifier(t, 0, t0, k)
	c := &clock{now: t0}
	c.set(v)
	raw := mint(t, sk, target, time.Hour, t0)
	if _, err := v.Verify(raw); err != nil {
		t.Fatal(err)
	}
	// Swap the key material behind the verifier's back: from now on a
	// real verification fails, a cache hit does not.
	_, other := keyPair(t, "k1", "HS256")
	v.keys["k1"].key.material = other.material
	c.now = t0.Add(CacheTTL - time.Second)
	if _, err := v.Verify(raw); err != nil {
		t.Fatalf("within the TTL (cache hit): %v", err)
	}
	c.now = t0.Add(CacheTTL)
	_, err := v.Verify(raw)
	assertOnly(t, err, ErrSignature, raw)
}

// TestCacheKeyIsTheWholeToken: a token that differs from a cached one in
// its signature only is verified on its own and refused; failures are not
// cached; a new Verifier (a reload) starts empty.
func TestCacheKeyIsTheWholeToken(t *testing.T) {
	sk, k := keyPair(t, "k1", "HS256")
	v := newVerifier(t, 0, t0, k)
	raw := mint(t, sk, target, time.Hour, t0)
	if _, err := v.Verify(raw); err != nil {
		t.Fatal(err)
	}
	dot := strings.LastIndexByte(raw, '.')
	sig := []byte(raw[dot+1:])
	if sig[0] == 'A' {
		sig[0] = 'B'
	} else {
		sig[0] = 'A'
	}
	forged := raw[:dot+1] + string(sig)
	for range 2 {
		_, err := v.Verify(forged)
		assertOnly(t, err, ErrSignature, forged)
	}
	if n := v.cache.len(); n != 1 {
		t.Fatalf("%d cache entries, want only the valid token", n)
	}
	_, otherKey := keyPair(t, "k1", "HS256")
	reloaded := newVerifier(t, 0, t0, otherKey)
	_, err := reloaded.Verify(raw)
	assertOnly(t, err, ErrSignature, raw)
}

// TestCacheNotYetValidIsNotCached: a token refused for its nbf is verified
// again later and accepted then.
func TestCacheNotYetValidIsNotCached(t *testing.T) {
	_, k := keyPair(t, "k1", "HS256")
	v := newVerifier(t, 0, t0, k)
	c := &clock{now: t0}
	c.set(v)
	claims := validClaims()
	claims["nbf"] = t0.Add(time.Minute).Unix()
	raw := sign(t, jwt.SigningMethodHS256, k.material, "k1", claims)
	_, err := v.Verify(raw)
	assertOnly(t, err, ErrNotYetValid, raw)
	c.now = t0.Add(2 * time.Minute)
	if got, err := v.Verify(raw); err != nil || got != target {
		t.Fatalf("after nbf: %+v, %v", got, err)
	}
}

// TestCacheBounded: more distinct valid tokens than CacheEntries keep the
// cache at or below CacheEntries entries; tokens longer than
// MaxCachedTokenLength are verified but not cached.
func TestCacheBounded(t *testing.T) {
	sk, k := keyPair(t, "k1", "HS256")
	v := newVerifier(t, 0, t0, k)
	for i := range CacheEntries + CacheEntries/2 {
		tg := Target{CredentialID: "cred", SandboxID: fmt.Sprintf("sbx-%d", i), Port: 49983}
		if _, err := v.Verify(mint(t, sk, tg, time.Hour, t0)); err != nil {
			t.Fatal(err)
		}
		if n := v.cache.len(); n > CacheEntries {
			t.Fatalf("%d entries after %d tokens", n, i+1)
		}
	}
	before := v.cache.len()
	long := Target{CredentialID: strings.Repeat("c", MaxIDLength), SandboxID: strings.Repeat("s", MaxIDLength), Port: 49983}
	raw := mint(t, sk, long, time.Hour, t0)
	if len(raw) <= MaxCachedTokenLength {
		// Make it longer with an ignored claim.
		claims := validClaims()
		claims["pad"] = strings.Repeat("p", MaxCachedTokenLength)
		raw = sign(t, jwt.SigningMethodHS256, k.material, "k1", claims)
	}
	if _, err := v.Verify(raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := v.cache.entries[raw]; ok || v.cache.len() > before {
		t.Fatalf("a %d-byte token was cached", len(raw))
	}
}
