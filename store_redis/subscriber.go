package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscribeWithin bounds how long a watch waits for the server to confirm
// its subscription, as go-redis's default ReadTimeout bounds a reply: a
// server that does not answer in time makes Watch fail, so that its
// caller polls instead of being stuck in Watch.
const subscribeWithin = 3 * time.Second

// errSubscriberClosed is the error of a watch whose subscriber closed,
// its last watch gone, just as the watch was joining it.
var errSubscriberClosed = errors.New("the subscription's connection was closed")

// subscribers are a store's shared subscribers, one per server that holds
// records watched right now.
type subscribers struct {
	mu     sync.Mutex
	byNode map[*redis.Client]*subscriber
}

// join subscribes to channel, on node's subscriber (started if need be),
// and returns the subscriber and channel's topic once the server confirmed
// the subscription. Unless it fails, the caller calls leave with both when
// it no longer waits.
func (ss *subscribers) join(ctx context.Context, node *redis.Client, channel string) (*subscriber, *topic, error) {
	ss.mu.Lock()
	sub := ss.byNode[node]
	if sub == nil || !sub.enter() {
		sub = ss.start(node)
		sub.enter()
	}
	ss.mu.Unlock()
	t, err := sub.subscribe(ctx, channel)
	if err != nil {
		sub.leave(t)
		return nil, nil, err
	}
	return sub, t, nil
}

// start starts a subscriber to node and records it; ss.mu is held.
func (ss *subscribers) start(node *redis.Client) *subscriber {
	sub := &subscriber{
		ps:     node.SSubscribe(context.Background()),
		exited: make(chan struct{}),
		topics: map[string]*topic{},
	}
	sub.forget = func() {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if ss.byNode[node] == sub {
			delete(ss.byNode, node)
		}
	}
	if ss.byNode == nil {
		ss.byNode = map[*redis.Client]*subscriber{}
	}
	ss.byNode[node] = sub
	go sub.read()
	return sub
}

// subscriber is one pub/sub connection to one server, shared by every
// watch of a record there, and its reading goroutine. It lives while a
// watch uses it, and dies with its connection: a connection that drops
// may have missed publications, so its death wakes every watch.
type subscriber struct {
	ps     *redis.PubSub
	exited chan struct{} // closed when read returns
	forget func()        // removes the subscriber from its subscribers

	mu      sync.Mutex
	watches int               // watches that use the subscriber, unconfirmed ones included
	topics  map[string]*topic // the channels it is, or is becoming, subscribed to
	dead    bool
	cause   error // why it died, when it did not close with its last watch
}

// topic is one channel of a subscriber, shared by the watches of one key.
//
// A topic is removed from its subscriber's topics (and unsubscribed from)
// only once confirmed, so that the server's replies to SSUBSCRIBE always
// belong to the channel's current topic. After the confirmation, any
// SUNSUBSCRIBE reply or message on the channel fires the topic: the server
// unsubscribed it (an unsubscription of an earlier topic that reached the
// server last, a slot that moved), or the record changed.
type topic struct {
	channel    string
	watches    int
	confirmed  bool
	subscribed chan struct{} // closed when confirmed, or when the subscriber died first
	changed    chan struct{} // closed when fired
	fired      bool
}

// enter counts one more watch of a live subscriber, and reports whether
// it was live.
func (sub *subscriber) enter() bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.dead {
		sub.watches++
	}
	return !sub.dead
}

// subscribe adds a watch to channel's topic, subscribing to the channel
// when it has no topic yet, and waits for the server's confirmation.
func (sub *subscriber) subscribe(ctx context.Context, channel string) (*topic, error) {
	sub.mu.Lock()
	if sub.dead {
		sub.mu.Unlock()
		return nil, errSubscriberClosed
	}
	t := sub.topics[channel]
	first := t == nil
	if first {
		t = &topic{channel: channel, subscribed: make(chan struct{}), changed: make(chan struct{})}
		sub.topics[channel] = t
	}
	t.watches++
	sub.mu.Unlock()
	if first {
		// Not under ctx: a write that times out makes go-redis drop the
		// connection, which every watch of the subscriber shares.
		if err := sub.ps.SSubscribe(context.WithoutCancel(ctx), channel); err != nil {
			sub.die(err)
			return t, err
		}
	}
	timer := time.NewTimer(subscribeWithin)
	defer timer.Stop()
	select {
	case <-t.subscribed:
	case <-ctx.Done():
		return t, ctx.Err()
	case <-timer.C:
		err := errors.New("no confirmation of the subscription within " + subscribeWithin.String())
		sub.die(err)
		return t, err
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !t.confirmed {
		return t, sub.cause
	}
	return t, nil
}

// leave ends a watch of t (nil for a watch that has no topic yet): the
// last watch of a confirmed topic unsubscribes from its channel, and the
// last watch of the subscriber closes its connection and waits for its
// goroutine to return.
func (sub *subscriber) leave(t *topic) {
	sub.mu.Lock()
	channel := ""
	if t != nil {
		t.watches--
		if t.watches == 0 && t.confirmed && !t.fired {
			channel = sub.remove(t)
		}
	}
	sub.watches--
	last := sub.watches == 0
	sub.dead = sub.dead || last // in this critical section, so that no watch enters it meanwhile
	sub.mu.Unlock()
	if last {
		sub.close()
		<-sub.exited
		return
	}
	sub.unsubscribe(channel)
}

// read reads the subscription's replies and messages until the connection
// fails or is closed, then kills the subscriber.
func (sub *subscriber) read() {
	defer close(sub.exited)
	for {
		msg, err := sub.ps.Receive(context.Background())
		if err != nil {
			sub.die(err)
			return
		}
		sub.unsubscribe(sub.handle(msg))
	}
}

// handle applies one reply or message to its channel's topic, and returns
// the channel to unsubscribe from, if any.
func (sub *subscriber) handle(msg any) string {
	var channel string
	confirmation := false
	switch m := msg.(type) {
	case *redis.Subscription:
		channel, confirmation = m.Channel, m.Kind == "ssubscribe"
	case *redis.Message:
		channel = m.Channel
	default:
		return ""
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	t := sub.topics[channel]
	switch {
	case t == nil || confirmation == t.confirmed:
		// A reply to an unsubscription of an earlier topic, or a
		// message for it; or a subscription confirmed again.
		return ""
	case confirmation:
		t.confirmed = true
		close(t.subscribed)
		if t.watches == 0 {
			return sub.remove(t)
		}
		return ""
	default:
		t.fired = true
		close(t.changed)
		channel = sub.remove(t)
		if _, unsubscribed := msg.(*redis.Subscription); unsubscribed {
			return ""
		}
		return channel
	}
}

// remove removes t, one of the subscriber's topics, and returns its
// channel; sub.mu is held.
func (sub *subscriber) remove(t *topic) string {
	delete(sub.topics, t.channel)
	return t.channel
}

// unsubscribe unsubscribes from channel, unless it is empty. A failure
// needs no care: the connection it leaves broken fails read, which kills
// the subscriber.
func (sub *subscriber) unsubscribe(channel string) {
	if channel != "" {
		_ = sub.ps.SUnsubscribe(context.Background(), channel)
	}
}

// die kills the subscriber for cause, once: no watch enters it any more,
// every confirmed topic fires (its connection may have missed a message),
// every unconfirmed one fails with cause, and the connection is closed.
func (sub *subscriber) die(cause error) {
	sub.mu.Lock()
	if sub.dead {
		sub.mu.Unlock()
		return
	}
	sub.dead, sub.cause = true, cause
	for channel, t := range sub.topics {
		if t.confirmed {
			t.fired = true
			close(t.changed)
		} else {
			close(t.subscribed)
		}
		delete(sub.topics, channel)
	}
	sub.mu.Unlock()
	sub.close()
}

// close closes the connection of a dead subscriber, which ends read, and
// forgets the subscriber, so that the next watch starts another.
func (sub *subscriber) close() {
	sub.forget()
	_ = sub.ps.Close()
}
