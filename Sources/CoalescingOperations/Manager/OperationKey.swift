/// What makes two coalescible operations the same work: their identifier and their `Value` type.
@usableFromInline
struct OperationKey: Hashable, Sendable {
    @usableFromInline let identifier: String
    @usableFromInline let valueType: ObjectIdentifier

    @inlinable
    init<Value>(identifier: String, valueType: Value.Type) {
        self.identifier = identifier
        self.valueType = ObjectIdentifier(valueType)
    }
}
