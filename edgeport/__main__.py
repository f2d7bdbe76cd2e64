from edgeport.cli import main

main()
