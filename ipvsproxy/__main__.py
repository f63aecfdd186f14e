from ipvsproxy.cli import main

main()
