/// What makes two coalescible operations the same work: their identifier and their `Value` type.
struct OperationKey: Hashable, Sendable {
    let identifier: String
    let valueType: ObjectIdentifier

    init<Value>(identifier: String, valueType: Value.Type) {
        self.identifier = identifier
        self.valueType = ObjectIdentifier(valueType)
    }
}
