package pgstore

// Test helpers for the external test package pgstore_test.
var (
	TestConfig = testConfig
	Connect    = connect
	TestTable  = testTable
	SendTo     = sendTo
)

// DropTable drops s's table.
var DropTable = dropTable
