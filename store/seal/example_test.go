package seal_test

import (
	"fmt"
	"strings"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/seal"
)

// A ring read from its file: the first line seals, every line opens.
func ExampleParseRing() {
	ring, err := seal.ParseRing(strings.NewReader(
		"2026-06 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n" +
			"2026-01 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\n"))
	if err != nil {
		fmt.Println(err)
		return
	}
	hash := store.HashKey("a record's storage key")
	sealed := ring.Seal(hash, &store.Response{Status: 201, Body: []byte(`{"id":"pay_1"}`)})
	opened, err := ring.Open(hash, sealed)
	fmt.Println(sealed.Status, sealed.Header.Get(seal.Header), string(opened.Body), err)
	// Output: 201 2026-06 {"id":"pay_1"} <nil>
}
