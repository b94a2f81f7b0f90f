/// How a caller reaches coalesced work; the benchmark names end with the raw value.
enum CallerPath: String, CaseIterable {
    /// `OperationQueueManager.enqueue(operation:)`: each caller builds an operation, which joins.
    case oursOperation = "ours-operation"
    /// `OperationQueueManager.enqueue(identifier:callBackQueue:makeOperation:completionHandler:)`:
    /// a joining caller hands over its handler only; no operation is built while work is in flight.
    case oursHandler = "ours-handler"
    /// The blog's manager: each caller builds an operation; a linear scan of `queue.operations`
    /// finds the work, and `coalesce(operation:)` nests the caller's handler in the work's.
    case naive
}
