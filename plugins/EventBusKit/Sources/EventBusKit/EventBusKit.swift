// Module code writes `import EventBusKit` and gets all of Combine (OpenCombine on Linux) with it.
@_exported import OpenCombine
@_exported import OpenCombineDispatch
