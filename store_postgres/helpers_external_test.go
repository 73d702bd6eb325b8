package pgstore_test

import pgstore "github.com/seed43327c4c/idempotency/store_postgres"

// sendTo sends a POST with key through h (see the package's own sendTo).
var sendTo = pgstore.SendTo
