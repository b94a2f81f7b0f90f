extension Task where Success == Void, Failure == Never {
    /// Starts a task with `name` on toolchains that have task names (Swift 6.2 and later), and
    /// without it elsewhere. The name shows in debuggers and in Instruments.
    @discardableResult
    static func named(
        _ name: String?,
        priority: TaskPriority?,
        operation: sending @escaping @isolated(any) () async -> Void
    ) -> Task<Void, Never> {
        #if compiler(>=6.2)
        Task(name: name, priority: priority, operation: operation)
        #else
        Task(priority: priority, operation: operation)
        #endif
    }
}
