package store_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

func TestCheckHash(t *testing.T) {
	hash := store.HashKey("k")
	cases := []struct {
		name, hash     string
		prefix, wantOK bool
	}{
		{"hash", hash, false, true},
		{"hash as prefix", hash, true, true},
		{"prefix", hash[:16], true, true},
		{"empty prefix", "", true, true},
		{"prefix as hash", hash[:16], false, false},
		{"too long", hash + "0", true, false},
		{"upper case", strings.ToUpper(hash), false, false},
		{"not hex", "g" + hash[1:], false, false},
		{"glob", "ab*", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := store.CheckHash(tc.hash, tc.prefix)
			if tc.wantOK {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, store.ErrBadHash)
			}
		})
	}
}
