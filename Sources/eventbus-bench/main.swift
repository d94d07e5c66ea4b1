import EventBusKit
print("bench")
