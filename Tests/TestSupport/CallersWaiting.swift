import CoalescingOperations

extension CoalescingStatistics {
    /// Callers waiting now, for every key together: each caller is counted once when it arrives
    /// and once when it leaves (Guarantee 21), so those not yet gone are the difference.
    public var callersWaiting: Int {
        callersArrived - callersServed - callersWithdrawn - callersTimedOut
    }
}
