package pgstore

// StatsCounts exposes the statistics path of EstimateInstanceCounts, which
// runs only above ExactCountBelow instances.
var StatsCounts = (*Store).statsCounts

// Migrations exposes the embedded migrations, to build an older schema.
var Migrations = migrations
