package dynamo

// PackData is packData, for the benchmark.
var PackData = packData
