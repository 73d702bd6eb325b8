package redisstore

// MastersMayHaveMoved exports mastersMayHaveMoved to the tests.
var MastersMayHaveMoved = mastersMayHaveMoved
