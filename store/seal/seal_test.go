package seal_test

import (
	"bytes"
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/seal"
)

func ring(t *testing.T, keys ...seal.Key) *seal.Ring {
	t.Helper()
	r, err := seal.NewRing(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func payment() *store.Response {
	return &store.Response{Status: 201,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/payments/pay_42"}, "X-Two": {"a", "b"}},
		Body:   []byte(`{"id":"pay_42","card":"4242424242424242"}`)}
}

var hash = store.HashKey("acct_1 POST /payments k-1")

func TestSealOpen(t *testing.T) {
	old := seal.Key{ID: "old", Secret: secret(1)}
	cur := seal.Key{ID: "new", Secret: secret(2)}
	before := ring(t, old)
	rotated := ring(t, cur, old)
	removed := ring(t, cur)

	t.Run("round trip hides header and body", func(t *testing.T) {
		resp := payment()
		sealed := before.Seal(hash, resp)
		if !reflect.DeepEqual(resp, payment()) {
			t.Fatal("Seal changed its argument")
		}
		if sealed.Status != 201 || !reflect.DeepEqual(sealed.Header, http.Header{seal.Header: {"old"}}) {
			t.Fatalf("sealed status %d, header %v", sealed.Status, sealed.Header)
		}
		for _, plain := range []string{"pay_42", "4242", "application/json", "Location", "X-Two"} {
			if bytes.Contains(sealed.Body, []byte(plain)) {
				t.Fatalf("sealed body holds %q", plain)
			}
		}
		opened, err := before.Open(hash, sealed)
		if err != nil || !reflect.DeepEqual(opened, payment()) {
			t.Fatalf("Open = %+v, %v; want %+v", opened, err, payment())
		}
	})
	t.Run("each seal differs", func(t *testing.T) {
		if bytes.Equal(before.Seal(hash, payment()).Body, before.Seal(hash, payment()).Body) {
			t.Fatal("two seals of one response are the same bytes: the nonce is not random")
		}
	})
	t.Run("rotation opens old and seals new", func(t *testing.T) {
		opened, err := rotated.Open(hash, before.Seal(hash, payment()))
		if err != nil || !reflect.DeepEqual(opened, payment()) {
			t.Fatalf("Open of an old key's seal = %+v, %v", opened, err)
		}
		if id, _ := seal.KeyID(rotated.Seal(hash, payment())); id != "new" {
			t.Fatalf("rotated ring seals under %q, want new", id)
		}
	})
	t.Run("empty header and body", func(t *testing.T) {
		opened, err := before.Open(hash, before.Seal(hash, &store.Response{Status: 204}))
		if err != nil || opened.Status != 204 || opened.Header != nil || len(opened.Body) != 0 {
			t.Fatalf("Open = %+v, %v", opened, err)
		}
	})
	t.Run("unsealed and nil open as themselves", func(t *testing.T) {
		plain := payment()
		if opened, err := before.Open(hash, plain); err != nil || opened != plain {
			t.Fatalf("Open of an unsealed response = %+v, %v", opened, err)
		}
		if opened, err := before.Open(hash, nil); err != nil || opened != nil || before.Seal(hash, nil) != nil {
			t.Fatalf("Open(nil) = %+v, %v", opened, err)
		}
	})

	sealed := before.Seal(hash, payment())
	tampered := func(edit func(*store.Response)) *store.Response {
		c := &store.Response{Status: sealed.Status, Header: sealed.Header.Clone(), Body: bytes.Clone(sealed.Body)}
		edit(c)
		return c
	}
	for _, tc := range []struct {
		name string
		ring *seal.Ring
		hash string
		resp *store.Response
		want error
	}{
		{"key removed", removed, hash, sealed, seal.ErrKeyMissing},
		{"body byte flipped", before, hash, tampered(func(r *store.Response) { r.Body[len(r.Body)-1] ^= 1 }), seal.ErrCorrupt},
		{"body cut", before, hash, tampered(func(r *store.Response) { r.Body = r.Body[:10] }), seal.ErrCorrupt},
		{"status changed", before, hash, tampered(func(r *store.Response) { r.Status = 200 }), seal.ErrCorrupt},
		{"moved to another record", before, store.HashKey("acct_2 POST /payments k-1"), sealed, seal.ErrCorrupt},
		{"renamed to another key", ring(t, seal.Key{ID: "other", Secret: secret(1)}), hash,
			tampered(func(r *store.Response) { r.Header.Set(seal.Header, "other") }), seal.ErrCorrupt},
		{"same id, other secret", ring(t, seal.Key{ID: "old", Secret: secret(9)}), hash, sealed, seal.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opened, err := tc.ring.Open(tc.hash, tc.resp)
			if !errors.Is(err, tc.want) || opened != nil {
				t.Fatalf("Open = %+v, %v; want %v", opened, err, tc.want)
			}
		})
	}
}

// BenchmarkSealOpen seals and opens a payment's response, as a first
// request and one replay of it do.
func BenchmarkSealOpen(b *testing.B) {
	r, err := seal.NewRing(seal.Key{ID: "k1", Secret: secret(1)})
	if err != nil {
		b.Fatal(err)
	}
	resp := payment()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Open(hash, r.Seal(hash, resp)); err != nil {
			b.Fatal(err)
		}
	}
}
