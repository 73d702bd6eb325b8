package store

import "hash/maphash"

// recordIndex holds a Memory store's records and finds them by key. The
// records live in one slice; a map takes a 32-bit hash of a key to the slot
// of the first record with that hash, and records whose keys share a hash
// are chained through their next slots. With 32 bits a map entry is 8
// bytes, not 16: a store of many records has a map half the size, whose
// lookup of a new key, which misses the processor's caches, misses them
// less often (about 0.2 µs a first request on the development machine).
// Keys share a hash once in about 2^32 / n for n records; their chain
// costs a comparison of keys more. The map holds no pointers, so the
// garbage collector never scans it; it scans the slice, whose slots have
// four pointer fields, of which a completed record sets one (its data): a
// store of many records costs each collection one pointer to follow per
// record.
type recordIndex struct {
	hash  func(key string) uint32
	first map[uint32]int32 // a key's hash: the slot of the first record with it
	slots []memRecord      // records; a free slot is the zero memRecord
	free  []int32          // free slots, to be reused before the slice grows
}

// newRecordIndex returns an empty index hashing keys with a random seed.
func newRecordIndex() recordIndex {
	seed := maphash.MakeSeed()
	return recordIndex{
		hash:  func(key string) uint32 { return uint32(maphash.String(seed, key)) },
		first: make(map[uint32]int32),
	}
}

// find returns the slot of key's record, whose key hashes to h, or -1.
func (x *recordIndex) find(h uint32, key string) int32 {
	i, ok := x.first[h]
	if !ok {
		return -1
	}
	for ; i >= 0; i = x.slots[i].next {
		if x.slots[i].key() == key {
			return i
		}
	}
	return -1
}

// insert adds r, the record of a key that hashes to h and has none yet.
func (x *recordIndex) insert(h uint32, r memRecord) {
	var i int32
	if n := len(x.free); n > 0 {
		i, x.free = x.free[n-1], x.free[:n-1]
	} else {
		i = int32(len(x.slots))
		x.slots = append(x.slots, memRecord{})
	}
	r.hash, r.next = h, -1
	if next, ok := x.first[h]; ok {
		r.next = next
	}
	x.slots[i] = r
	x.first[h] = i
}

// replace puts r, a record of the same key, in slot i.
func (x *recordIndex) replace(i int32, r memRecord) {
	r.hash, r.next = x.slots[i].hash, x.slots[i].next
	x.slots[i] = r
}

// remove deletes the record in slot i.
func (x *recordIndex) remove(i int32) {
	h, next := x.slots[i].hash, x.slots[i].next
	if head := x.first[h]; head == i {
		if next < 0 {
			delete(x.first, h)
		} else {
			x.first[h] = next
		}
	} else {
		p := head
		for x.slots[p].next != i {
			p = x.slots[p].next
		}
		x.slots[p].next = next
	}
	x.slots[i] = memRecord{} // a free slot keeps no strings alive
	x.free = append(x.free, i)
}

// len returns how many records the index holds: every slot not free.
func (x *recordIndex) len() int { return len(x.slots) - len(x.free) }
