from pa_bridge.cli import main

main()
