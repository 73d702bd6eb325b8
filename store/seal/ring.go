// Package seal encrypts the responses a store keeps, so that whoever reads
// the store, a backup or a replica sees no status line's body or header.
// A Ring holds the keys: the current one seals, every one opens, and each
// sealed response names the key that sealed it. It uses AES-256-GCM from
// the standard library: authenticated (a changed byte fails to open), with
// no dependency, and the cipher every auditor knows.
package seal

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
)

// KeySize is the length of every key of a ring: AES-256.
const KeySize = 32

// maxIDLen bounds a key id, which every sealed response carries.
const maxIDLen = 64

// Key is one key of a ring: an ID naming it in the responses it seals, of
// 1 to 64 letters, digits, '.', '_' or '-', and KeySize bytes of Secret.
type Key struct {
	ID     string
	Secret []byte
}

// Ring is a set of keys, the first the current one. Its methods are safe
// for concurrent use.
type Ring struct {
	current string
	aeads   map[string]cipher.AEAD
}

// NewRing returns the ring of keys, keys[0] the current one. It returns an
// error for no keys, an id out of form or used twice, or a secret of other
// than KeySize bytes.
func NewRing(keys ...Key) (*Ring, error) {
	if len(keys) == 0 {
		return nil, errors.New("seal: a ring needs a current key, and has none")
	}
	r := &Ring{current: keys[0].ID, aeads: make(map[string]cipher.AEAD, len(keys))}
	for _, k := range keys {
		if err := checkID(k.ID); err != nil {
			return nil, err
		}
		if len(k.Secret) != KeySize {
			return nil, fmt.Errorf("seal: key %q is %d bytes, want %d", k.ID, len(k.Secret), KeySize)
		}
		if _, dup := r.aeads[k.ID]; dup {
			return nil, fmt.Errorf("seal: key id %q is in the ring twice", k.ID)
		}
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("seal: key %q: %w", k.ID, err)
		}
		if r.aeads[k.ID], err = cipher.NewGCMWithRandomNonce(block); err != nil {
			return nil, fmt.Errorf("seal: key %q: %w", k.ID, err)
		}
	}
	return r, nil
}

// ParseRing reads a ring from src: one key a line, its id, blanks, and its
// secret in standard base64, the first line the current key. Blank lines
// and lines beginning with '#' are skipped. Errors name the line.
func ParseRing(src io.Reader) (*Ring, error) {
	var keys []Key
	lines := bufio.NewScanner(src)
	for n := 1; lines.Scan(); n++ {
		line := strings.TrimSpace(lines.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("seal: line %d: want \"ID BASE64\", got %d fields", n, len(fields))
		}
		secret, err := base64.StdEncoding.DecodeString(fields[1])
		if err != nil {
			return nil, fmt.Errorf("seal: line %d: key %q is not standard base64", n, fields[0])
		}
		keys = append(keys, Key{ID: fields[0], Secret: secret})
	}
	if err := lines.Err(); err != nil {
		return nil, fmt.Errorf("seal: reading the ring: %w", err)
	}
	return NewRing(keys...)
}

// Current returns the id of the key that seals.
func (r *Ring) Current() string { return r.current }

// Has reports whether the ring holds the key named id.
func (r *Ring) Has(id string) bool {
	_, ok := r.aeads[id]
	return ok
}

func checkID(id string) error {
	ok := id != "" && len(id) <= maxIDLen
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._-", c) >= 0
	}
	if !ok {
		return fmt.Errorf("seal: key id %q: want 1 to %d letters, digits, '.', '_' or '-'", id, maxIDLen)
	}
	return nil
}
